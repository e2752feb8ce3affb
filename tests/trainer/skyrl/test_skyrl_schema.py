"""The rendered overrides against SkyRL 0.3.x's own config classes (``trainer/skyrl/schema_check.py``): built with
``SkyRLTrainConfig.from_cli_overrides``, every key read back unchanged, and SkyRL's ``validate_cfg`` passing.

Slow, and skipped unless SkyRL imports in the interpreter named by ``RECIPE_SKYRL_PYTHON`` (default: this one, where
the ``cluster`` extra installs it):

    RECIPE_SKYRL_PYTHON=/path/to/skyrl-env/bin/python .venv/bin/python -m pytest -m slow \
        tests/trainer/skyrl/test_skyrl_schema.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.commands.cluster import skyrl_run
from flows.config import load_profile
from trainer.skyrl.render import render

pytestmark = pytest.mark.slow
CHECK = Path(__file__).resolve().parents[3] / "trainer" / "skyrl" / "schema_check.py"
PYTHON = os.environ.get("RECIPE_SKYRL_PYTHON", sys.executable)


@pytest.fixture(scope="module")
def skyrl_python() -> str:
    probe = subprocess.run(
        [PYTHON, "-c", "import skyrl.train.config.config"], capture_output=True, text=True, timeout=300
    )
    if probe.returncode != 0:
        pytest.skip(f"SkyRL does not import in {PYTHON} (set RECIPE_SKYRL_PYTHON): {probe.stderr.strip()[-200:]}")
    return PYTHON


def _check(python: str, lines: list[str], tmp_path: Path) -> tuple[int, dict]:
    overrides = tmp_path / "overrides.txt"
    overrides.write_text("\n".join(lines) + "\n")
    done = subprocess.run([python, str(CHECK), str(overrides)], capture_output=True, text=True, timeout=600)
    assert done.stdout.strip(), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize(("profile", "arm"), [("qwen36-35b", None), ("qwen35-397b", None), ("qwen36-35b", "baseline")])
def test_skyrl_builds_and_validates_the_rendered_config(skyrl_python: str, tmp_path: Path, profile, arm) -> None:
    lines = render(skyrl_run(load_profile(profile), arm)).lines()
    code, report = _check(skyrl_python, lines, tmp_path)
    assert report["built"] == "passed" and report["readback_mismatches"] == [], report
    assert report["validate_cfg"] in ("passed",) or report["validate_cfg"].startswith("skipped"), report
    assert code == 0 and report["keys"] == len(lines)


def test_skyrl_rejects_what_it_should(skyrl_python: str, tmp_path: Path) -> None:
    """The check is not a rubber stamp: an unknown key fails the build, a broken batch rule fails validate_cfg."""
    lines = render(skyrl_run(load_profile("qwen36-35b"))).lines()
    code, report = _check(skyrl_python, [*lines, "trainer.algorithm.no_such_key=1"], tmp_path)
    assert code == 1 and "no_such_key" in report["built"]
    broken = [line.replace("train_batch_size=16", "train_batch_size=24") for line in lines]  # 24 % 16 != 0
    code, report = _check(skyrl_python, broken, tmp_path)
    if report["validate_cfg"].startswith("skipped"):
        pytest.skip(f"validate_cfg did not load here: {report['validate_cfg']}")
    assert code == 1 and "divisible" in report["validate_cfg"]
