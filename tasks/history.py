"""The overfit gate over runs: what the nightly job measured night after night, and at which commit it broke.

The nightly overfit gate (``flows.nightly``) is one run of a profile per night, up to the overfit stage; its runs sit
beside the profile's other runs under the runs root. ``overfit_history`` reads them back, oldest first: per run the
code version ``run.json`` recorded, the overfit stage's status and what its gate measured (reward before and after,
the gain, the one-sided p). ``failure_streak`` then answers what a broken night needs: the last run that passed and
the first of the failures since, each with its commit — the range to bisect.

A run without an overfit manifest (stopped earlier with ``--stop-after``, or still before the stage) is not listed. A
run whose overfit stage was skipped is listed and counts as a failure: an earlier gate failed, so the code did not even
reach the overfit gate that night. A run whose overfit stage is still running is listed but neither passes nor fails.
A run whose manifest cannot be read is left out (``recipe audit`` names the damaged file).

    rows = overfit_history(Path("runs"), "local")
    streak = failure_streak(rows)
    print("\\n".join(streak.lines()))   # last passed at 3fcefa0e1b (run …, 2026-12-01…) / first failed at …
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.run_store import CodeVersion, RunStoreError, StageManifest, StageStatus, runs_of

OVERFIT_FOLDER = "4-overfit"
"""``flows.config.StageName.OVERFIT.folder`` (tasks never import flows; a test keeps the two equal)."""
FAILED = frozenset({StageStatus.GATE_FAILED, StageStatus.ERROR, StageStatus.SKIPPED})


@dataclass(frozen=True)
class OverfitNight:
    """One run's overfit stage, as the history lists it."""

    run_id: str
    created_at: str
    code: CodeVersion
    status: StageStatus
    reward_before: float | None
    reward_after: float | None
    gain: float | None
    p_value: float | None
    failed_criteria: tuple[str, ...]
    """Names of the gate's criteria that did not hold (empty when it passed, or had no gate)."""
    note: str | None
    """Why it has no gate verdict: the error it raised, or why it was skipped."""

    @property
    def passed(self) -> bool:
        return self.status is StageStatus.PASSED

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def where(self) -> str:
        """``<commit> (run <id>, <created_at>)``: how the alert and the report name a night."""
        return f"{self.code.label} (run {self.run_id}, {self.created_at})"

    def as_json(self) -> dict[str, Any]:
        """The night as the alert's structured fields carry it."""
        return {
            "run_id": self.run_id,
            "created_at": self.created_at,
            "commit": self.code.commit,
            "dirty": self.code.dirty,
            "status": self.status.value,
            "gain": self.gain,
            "p_value": self.p_value,
        }


def _number(metrics: dict[str, Any], key: str) -> float | None:
    value = metrics.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _night(run_id: str, created_at: str, code: CodeVersion, manifest: StageManifest) -> OverfitNight:
    criteria = (manifest.gate or {}).get("criteria", [])
    failed = tuple(str(c.get("name", "?")) for c in criteria if isinstance(c, dict) and not c.get("passed"))
    return OverfitNight(
        run_id=run_id,
        created_at=created_at,
        code=code,
        status=manifest.status,
        reward_before=_number(manifest.metrics, "reward_before"),
        reward_after=_number(manifest.metrics, "reward_after"),
        gain=_number(manifest.metrics, "gain"),
        p_value=_number(manifest.metrics, "p_value"),
        failed_criteria=failed,
        note=manifest.error,
    )


def overfit_history(runs_root: Path, profile: str) -> list[OverfitNight]:
    """The runs of ``profile`` under ``runs_root`` that have an overfit stage, in creation order (module docstring)."""
    nights = []
    for store in runs_of(runs_root, profile):
        try:
            info, manifest = store.info(), store.manifest(OVERFIT_FOLDER)
        except RunStoreError:
            continue
        if manifest is not None:
            nights.append(_night(info.run_id, info.created_at, info.code_version, manifest))
    return nights


@dataclass(frozen=True)
class FailureStreak:
    """The current run of failures at the end of the history, and the pass before it."""

    last_passed: OverfitNight | None
    """The newest run that passed (None: none ever did)."""
    first_failed: OverfitNight | None
    """The first failure after ``last_passed`` (None: the newest finished run passed, or nothing finished yet)."""
    failures: int
    """Failed runs since ``last_passed``."""

    def lines(self) -> list[str]:
        """The two lines the alert, the report and ``recipe history`` print."""
        passed = f"last passed at {self.last_passed.where()}" if self.last_passed else "last passed: never"
        if self.first_failed is None:
            failed = "first failed: – (no failure since)"
        else:
            failed = f"first failed at {self.first_failed.where()}; {self.failures} failed run(s) in a row"
        return [passed, failed]

    def as_json(self) -> dict[str, Any]:
        return {
            "last_passed": self.last_passed.as_json() if self.last_passed else None,
            "first_failed": self.first_failed.as_json() if self.first_failed else None,
            "failures_since_last_pass": self.failures,
        }


def failure_streak(nights: list[OverfitNight]) -> FailureStreak:
    """The last pass and the failures after it, over the finished runs of ``nights`` (oldest first; a run still
    running is neither)."""
    finished = [n for n in nights if n.passed or n.failed]
    passes = [i for i, night in enumerate(finished) if night.passed]
    start = passes[-1] + 1 if passes else 0
    streak = finished[start:]
    return FailureStreak(
        last_passed=finished[passes[-1]] if passes else None,
        first_failed=streak[0] if streak else None,
        failures=len(streak),
    )
