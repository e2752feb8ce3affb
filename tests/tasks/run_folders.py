"""Hand-built run folders for the tests of the commands that read many runs (history, compare, prune): made with the
run store's own API, so they look exactly like a pipeline's, with only the records a test needs.

    store = make_run(tmp_path, "local-1", created_at="2026-12-01T01:00:00+00:00", commit="a" * 40)
    add_stage(store, "4-overfit", StageStatus.PASSED, metrics={"gain": 0.2, "p_value": 0.001})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.run_store import CodeVersion, RunStore, StageManifest, StageStatus


def make_run(
    runs_root: Path,
    run_id: str,
    *,
    profile: str = "local",
    created_at: str,
    commit: str | None = None,
    config: dict[str, Any] | None = None,
) -> RunStore:
    """A run folder with ``run.json`` recording ``created_at``, the code version ``commit`` and ``config`` (a stub
    unless a test opens a stage on the run)."""
    store = RunStore.create(runs_root, profile, config or {"profile": profile}, "hash-" + run_id, run_id=run_id)
    version = CodeVersion(commit=commit, dirty=False, package="0.1.0")
    store.write_info(store.info().model_copy(update={"created_at": created_at, "code_version": version}))
    return store


def criterion(name: str, measured: float, op: str, threshold: float, passed: bool) -> dict[str, Any]:
    return {"name": name, "measured": measured, "op": op, "threshold": threshold, "passed": passed, "detail": ""}


def add_stage(
    store: RunStore,
    folder: str,
    status: StageStatus,
    *,
    metrics: dict[str, Any] | None = None,
    criteria: list[dict[str, Any]] | None = None,
    outputs: dict[str, Any] | None = None,
    duration_s: float | None = 1.0,
    error: str | None = None,
) -> StageManifest:
    """Write a stage manifest (with a gate report when ``criteria`` are given) and return it."""
    gate = None
    if criteria is not None:
        stage = folder.split("-", 1)[1]
        passed = all(c["passed"] for c in criteria)
        gate = {"stage": stage, "passed": passed, "criteria": criteria, "findings": [], "metrics": metrics or {}}
    manifest = StageManifest(
        stage=folder.split("-", 1)[1],
        folder=folder,
        status=status,
        metrics=metrics or {},
        gate=gate,
        outputs=outputs or {},
        duration_s=duration_s,
        error=error,
    )
    store.write_manifest(manifest)
    return manifest


def overfit(store: RunStore, passed: bool, gain: float, p_value: float = 0.001) -> StageManifest:
    """A finished overfit stage that passed or failed its gate (gain ≥ 0.05, p ≤ 0.01)."""
    criteria = [
        criterion("subset reward gain", gain, ">=", 0.05, gain >= 0.05),
        criterion("one-sided p (paired over tasks)", p_value, "<=", 0.01, p_value <= 0.01),
    ]
    assert passed == all(c["passed"] for c in criteria), "the numbers must give the verdict asked for"
    metrics = {"reward_before": 0.2, "reward_after": 0.2 + gain, "gain": gain, "p_value": p_value}
    status = StageStatus.PASSED if passed else StageStatus.GATE_FAILED
    return add_stage(store, "4-overfit", status, metrics=metrics, criteria=criteria)
