"""The chaos run: the smoke profile's de-risk → systems stages with >= 10 % injected infra faults (``envs.faults``).

Every stage must finish (no hang: pytest-timeout), and every rollout must be accounted for: graded, or recorded with
its error class; no group comes back short (``tasks.faults.fault_report``: ``lost`` = 0). The gates that measure
infra and tool health are opened wide (faults are the point here); ``make chaos`` runs the longer version
(``RL_RECIPE_CHAOS_STAGE`` / ``RL_RECIPE_CHAOS_RATE``) and prints the figures by kind.

Every stage through hero has injection sites (de-risk: tools, sandboxes, engine; TITO: the engine over HTTP; the
training stages: the engine and group generation), so each must report faults. Seed 31 is chosen for that: the
first fault of both its ``engine`` and its ``worker`` stream comes at the second draw at a rate of 0.1 (at most
the second draw at any higher rate), so even the systems stage's one-step trials, a handful of groups each, get some.
"""

import json
import os
from pathlib import Path

import pytest

from envs.faults import JUDGE_FAULTS, FaultKind
from flows.pipeline import pipeline
from tasks.catalog import Catalog
from tasks.faults import FAULT_REPORT
from tasks.run_store import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(1200)]

STOP_AFTER = os.environ.get("RL_RECIPE_CHAOS_STAGE", "systems")
RATE = float(os.environ.get("RL_RECIPE_CHAOS_RATE", "0.1"))
KINDS = [str(kind) for kind in FaultKind if kind not in JUDGE_FAULTS]  # the smoke profile has no judge
CHAOS = [
    f"faults.rate={RATE}",
    f"faults.kinds=[{','.join(KINDS)}]",
    "faults.seed=31",
    "faults.stall_s=30",
    "faults.timeout_s=6",  # a stalled request is cut here (the smoke model answers in well under a second)
    "harness.tool_timeout_s=3",  # a hung tool call ends here, as the model's observation
    "stages.derisk.thresholds.max_infra_error_rate=1.0",
    "stages.derisk.thresholds.max_tool_failure_rate=1.0",
    "stages.derisk.thresholds.max_tool_empty_rate=1.0",
    "stages.derisk.thresholds.max_tool_timeout_rate=1.0",
    "stages.systems.thresholds.max_trainer_idle_share=1.0",  # an injected engine stall idles the trainer by design
]


@pytest.fixture(scope="module")
def chaos_run(prefect_harness, environment_data: Path, tmp_path_factory) -> RunStore:
    runs = tmp_path_factory.mktemp("runs")
    pipeline(
        profile="smoke",
        overrides=(f"environment.data={environment_data}", *CHAOS),
        stop_after=STOP_AFTER,
        runs_root=str(runs),
        return_state=True,
    )
    [folder] = [p for p in runs.iterdir() if (p / "run.json").exists()]
    return RunStore(folder)


def test_every_rollout_is_graded_or_accounted_for_and_none_is_lost(chaos_run: RunStore) -> None:
    reports = [json.loads(p.read_text()) for p in sorted(chaos_run.root.glob(f"*/{FAULT_REPORT}"))]
    print("\nchaos figures:\n" + json.dumps(reports, indent=1))
    assert [m.status.value for m in chaos_run.manifests()][: len(reports)] == ["passed"] * len(reports)
    assert reports and sum(r["injected_total"] for r in reports) > 0
    catalog = Catalog(chaos_run.catalog_path)
    for report in reports:
        stage = report["stage"]
        assert report["injected_total"] > 0, f"{stage}: no fault was injected"  # every stage has injection sites
        assert report["trajectories"]["lost"] == 0
        assert report["trajectories"]["total"] == catalog.count("trajectories", stage)
        [row] = catalog.query(
            "SELECT count(*) FILTER (WHERE error_class = 'retryable_infra' AND reward <> 0) AS scored_infra "
            "FROM trajectories WHERE stage = ?",
            [stage],
        )
        assert row["scored_infra"] == 0  # an infra failure is never graded (and never trained on)
    derisk = next(r for r in reports if r["stage"] == "derisk")
    samples, tasks = 4, 12
    assert derisk["trajectories"]["total"] == samples * tasks  # count in = count out


def test_the_report_figures_land_in_the_stage_folders(chaos_run: RunStore) -> None:
    for path in chaos_run.root.glob(f"*/{FAULT_REPORT}"):
        report = json.loads(Path(path).read_text())
        assert set(report) >= {"injected", "retried", "trajectories", "tool_calls"}
