"""The gated pipeline end to end on the smoke profile, against one session-scoped Prefect test server.

A run whose overfit bar is out of reach stops there as GateFailed with the later stages skipped; fixing the bar and
resuming runs the overfit stage again and the rest of the chain, and never the three stages that passed (their
manifests are untouched). A known-bad tool variant fails the de-risk gate with a finding naming the tool, its rate
and the fix, and nothing after it runs. The smoke base is bootstrapped into models/base on first use (~1 min).
"""

from pathlib import Path

import pytest

from flows.pipeline import pipeline
from tasks.catalog import Catalog
from tasks.report import audit_lines, write_report
from tasks.run_store import RunStore, StageStatus

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PASSED, FAILED, SKIPPED = StageStatus.PASSED, StageStatus.GATE_FAILED, StageStatus.SKIPPED


@pytest.fixture(scope="module")
def data(environment_data: Path) -> Path:
    return environment_data


def run_smoke(runs: Path, data: Path, *overrides: str, resume: str | None = None):
    settings = [f"environment.data={data}", *overrides]
    state = pipeline(
        profile=None if resume else "smoke",
        resume=resume,
        overrides=settings,
        runs_root=str(runs),
        return_state=True,
    )
    [folder] = [p for p in runs.iterdir() if (p / "run.json").exists()]
    return state, RunStore(folder)


def statuses(store: RunStore) -> list[StageStatus]:
    return [m.status for m in store.manifests()]


@pytest.fixture(scope="module")
def failed_at_overfit(prefect_harness, data, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    return run_smoke(runs, data, "stages.overfit.thresholds.min_reward_gain=1.0")


def test_a_failed_gate_stops_the_pipeline(failed_at_overfit) -> None:
    state, store = failed_at_overfit
    assert state.is_failed() and state.name == "GateFailed"
    assert statuses(store) == [PASSED] * 3 + [FAILED] + [SKIPPED] * 3
    overfit = store.manifest("4-overfit")
    [broken] = [c for c in overfit.gate["criteria"] if not c["passed"]]
    assert broken["name"] == "subset reward gain" and broken["threshold"] == 1.0 and broken["measured"] < 1.0
    catalog = Catalog(store.catalog_path)
    for stage in ("derisk", "tito", "overfit"):
        assert catalog.count("trajectories", stage) > 0
    assert catalog.count("train_steps", "systems") > 0 and catalog.count("gates", "overfit") == 2
    assert catalog.count("trajectories", "hero") == 0
    assert (store.root / "4-overfit" / "gate.md").read_text().startswith("# Stage 4 · overfit — gate FAILED")


def test_resume_after_fixing_the_bar_reruns_only_what_did_not_pass(failed_at_overfit, data) -> None:
    _, store = failed_at_overfit
    before = {m.folder: m for m in store.manifests()}
    state, _ = run_smoke(
        store.root.parent, data, "stages.overfit.thresholds.min_reward_gain=-1.0", resume=str(store.root)
    )
    assert state.is_completed(), state.message
    after = {m.folder: m for m in store.manifests()}
    assert all(m.status is PASSED for m in after.values()) and len(after) == 7
    for folder in ("1-derisk", "2-tito", "3-systems"):  # not run again: the manifests are the first run's
        assert after[folder] == before[folder]
    assert after["4-overfit"].attempt == 2 and after["4-overfit"].fingerprint != before["4-overfit"].fingerprint
    # the hero trained with the base's examples beside RL (smoke's retention.coef > 0): the set and each step's loss
    assert (store.root / "6-hero" / "retention.jsonl").is_file() and after["6-hero"].metrics["retention_nll_last"] > 0
    [change] = store.info().history
    assert "stages.overfit.thresholds.min_reward_gain=-1.0" in change.reason
    trail = "\n".join(audit_lines(store))
    assert all(f"{m} " in trail for m in after) and "pass subset reward gain" in trail
    report = write_report(store)
    html = report.html.read_text()
    assert all(folder in html for folder in after) and "data:image/png;base64" in html


def test_a_run_copied_elsewhere_audits_reports_and_views_without_the_original(failed_at_overfit, tmp_path) -> None:
    """The run folder copied to another root (another checkout, another machine) and the original moved away: the
    audit, the report and the trace explorer work from the copy and name none of the original's paths."""
    import shutil

    from tasks.explorer.queries import Explorer
    from tasks.explorer.static_export import write_static

    _, store = failed_at_overfit
    copy = RunStore(shutil.copytree(store.root, tmp_path / "elsewhere" / "runs" / store.root.name))
    away = store.root.rename(store.root.with_name(store.root.name + "-away"))
    try:
        trail = "\n".join(audit_lines(copy))
        assert f"folder {copy.root.resolve()}" in trail and str(store.root) not in trail
        assert all(f"{m.folder} " in trail for m in copy.manifests())
        assert "data:image/png;base64" in write_report(copy).html.read_text()
        export = write_static(Explorer(copy), tmp_path / "view")
        assert export.index.is_file() and export.written > 0
    finally:
        away.rename(store.root)


def test_a_known_bad_variant_fails_derisk_and_nothing_later_runs(prefect_harness, data, tmp_path) -> None:
    state, store = run_smoke(tmp_path, data, "sandbox.variants=[slides_returns_none]")
    assert state.name == "GateFailed" and statuses(store) == [FAILED] + [SKIPPED] * 6
    gate = store.manifest("1-derisk").gate
    [finding] = gate["findings"]
    assert finding["subject"] == "slides_add_slide" and finding["rate"] == 1.0
    assert "returns nothing" in finding["problem"] and "confirmation" in finding["advice"]
    assert Catalog(store.catalog_path).count("trajectories", "tito") == 0
