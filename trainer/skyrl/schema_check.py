"""Check a rendered override set against SkyRL's own config classes. A script for an environment with SkyRL installed:

    python trainer/skyrl/schema_check.py OVERRIDES_FILE...     # one key=value per line; prints a JSON report each

1. builds the config with ``SkyRLTrainConfig.from_cli_overrides`` (SkyRL's parser, strict key check and
   ``__post_init__`` rules), extended the way our entry point extends it: the generator config declares SkyRL's
   ``RateLimiterConfig`` as ``rate_limit`` and the top level our ``rl_recipe`` section;
2. reads every key back from the built config and compares it with what OmegaConf parsed (nothing renamed, dropped
   or coerced);
3. runs SkyRL's ``validate_cfg`` (batch sizes, Megatron, generator, placement rules) when its imports load (it needs
   torch and ray); otherwise says why it was skipped.

Exit 0 when 1 and 2 hold and 3 passed or was skipped, 1 otherwise. Imports only SkyRL and the standard library: run
it as a file, not as a module of this package.

Python 3.11: SkyRL 0.3.0 declares Python ≥ 3.11, but building the full config imports one of its modules that uses
``typing.TypedDict`` inside a pydantic model, which pydantic accepts only from Python 3.12; as pydantic's error
advises, the check swaps in ``typing_extensions.TypedDict`` before importing SkyRL.
"""

# No ``from __future__ import annotations``: SkyRL resolves nested config classes from real field types.
import dataclasses
import json
import sys
import typing
from importlib.metadata import version
from pathlib import Path
from typing import Any

if sys.version_info < (3, 12):
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]


def _lookup(node: Any, key: str) -> Any:
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def recipe_config_class() -> type:
    """SkyRL's ``SkyRLTrainConfig`` extended as our entry point (``trainer.skyrl.main``) runs it: the generator config
    declares SkyRL's ``RateLimiterConfig`` as ``rate_limit``, the top level our ``rl_recipe`` section."""
    from skyrl.train.config.config import GeneratorConfig, SkyRLTrainConfig
    from skyrl.train.utils.rate_limiter import RateLimiterConfig

    @dataclasses.dataclass
    class RecipeGeneratorConfig(GeneratorConfig):
        rate_limit: RateLimiterConfig = dataclasses.field(default_factory=RateLimiterConfig)

    @dataclasses.dataclass
    class RecipeSkyRLConfig(SkyRLTrainConfig):
        generator: RecipeGeneratorConfig = dataclasses.field(default_factory=RecipeGeneratorConfig)
        rl_recipe: dict = dataclasses.field(default_factory=dict)

    return RecipeSkyRLConfig


def check(lines: list[str]) -> dict[str, Any]:
    from omegaconf import OmegaConf

    report: dict[str, Any] = {"skyrl": version("skyrl"), "python": sys.version.split()[0], "keys": len(lines)}
    try:
        cfg = recipe_config_class().from_cli_overrides(lines)
    except (AssertionError, ValueError, TypeError) as error:  # an unknown key, a bad value, a broken rule
        return report | {"built": f"failed: {type(error).__name__}: {error}", "readback_mismatches": []}
    report["built"] = "passed"
    mismatches = []
    for line in lines:
        key = line.partition("=")[0]
        wanted = OmegaConf.to_container(OmegaConf.from_cli([line]))
        wanted = _lookup(wanted, key)
        got = _lookup(cfg, key)
        if got != wanted and not (isinstance(got, tuple | list) and list(got) == wanted):
            mismatches.append(f"{key}: rendered {wanted!r}, SkyRL holds {got!r}")
    report["readback_mismatches"] = mismatches
    try:  # SkyRL's launch-time rules
        from skyrl.train.utils.utils import validate_cfg
    except ImportError as error:
        report["validate_cfg"] = f"skipped: {error}"
    else:
        try:
            validate_cfg(cfg)
            report["validate_cfg"] = "passed"
        except ImportError as error:  # it imports SkyRL's loss registry, which needs the training stack
            report["validate_cfg"] = f"skipped: {error}"
        except (AssertionError, ValueError, NotImplementedError) as error:
            report["validate_cfg"] = f"failed: {type(error).__name__}: {error}"
    return report


def main(argv: list[str]) -> int:
    """One report per file (a JSON object for one file, a list for several: one SkyRL import for them all)."""
    if not argv:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    reports = []
    for name in argv:
        lines = [line.strip() for line in Path(name).read_text().splitlines() if line.strip()]
        reports.append(check(lines))
    print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
    return 0 if all(passed(report) for report in reports) else 1


def passed(report: dict[str, Any]) -> bool:
    ok = report["built"] == "passed" and not report["readback_mismatches"]
    return ok and not str(report.get("validate_cfg", "failed")).startswith("failed")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
