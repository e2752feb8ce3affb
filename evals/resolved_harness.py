"""The harness an eval runs with: the policy's ``harness.json`` (``envs.harness.policy``: tool listing, system
prompt, apps, context budget, max tokens per turn — what it was trained with), found in ``spec.policy``, else in the
tokenizer folder, else in the model when that is a local folder (the terminal harness with the policy's terminal turn
limit, ``PolicyHarness.for_terminal``); ``spec.harness_config``'s set fields go on top.
Without a ``harness.json`` the ``HarnessConfig`` defaults apply. ``ResolvedHarness.origin`` says where the settings
came from, for the run's files and for error hints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envs.harness.agent import HarnessConfig
from envs.harness.policy import HARNESS_FILE, PolicyHarness, read_policy_harness
from evals.errors import EvalConfigError
from evals.spec import EvalSpec, HarnessKind


@dataclass(frozen=True)
class ResolvedHarness:
    """The harness an eval runs with and where its settings came from (for the run's files and error hints)."""

    settings: PolicyHarness
    source: Path | None  # the harness.json read; None: HarnessConfig defaults
    looked_in: list[Path]
    overridden: list[str]  # HarnessConfig fields the spec sets on top

    def origin(self, field: str | None = None) -> str:
        """Where the settings (or one ``HarnessConfig`` field of them) came from, for a reader or an error message."""
        if field is not None and field in self.overridden:
            return "the command line"
        on_top = (
            f", with {', '.join(self.overridden)} from the command line" if field is None and self.overridden else ""
        )
        if self.source is not None:
            return f"the policy's {self.source}{on_top}"
        where = ", ".join(str(p) for p in self.looked_in) or "no local tokenizer or model folder"
        return (
            f"the harness defaults{on_top}, as no {HARNESS_FILE} is in {where} (pass --policy DIR, the served "
            f"policy's folder; `recipe model bootstrap` adds {HARNESS_FILE} to an older cached base)"
        )


def resolve_harness(spec: EvalSpec) -> ResolvedHarness:
    """The policy's ``harness.json`` (``EvalSpec.policy_candidates``, first found) with the spec's overrides on top."""
    looked_in = spec.policy_candidates()
    if spec.policy is not None and not (spec.policy / HARNESS_FILE).is_file():
        raise EvalConfigError(
            f"--policy {spec.policy} holds no {HARNESS_FILE}; policy folders written by recipe carry one "
            "(`recipe model bootstrap` adds it to an older cached base)"
        )
    source, stored = None, None
    for folder in looked_in:
        stored = read_policy_harness(folder)
        if stored is not None:
            source = folder / HARNESS_FILE
            break
    base = stored or PolicyHarness(harness=HarnessConfig())
    if spec.harness is HarnessKind.TERMINAL:
        base = base.for_terminal()
    settings = base.model_copy(update={"harness": spec.harness_config.apply(base.harness)})
    overridden = sorted(spec.harness_config.model_dump(exclude_none=True))
    return ResolvedHarness(settings, source, looked_in, overridden)
