"""What a stage publishes, from hand-made records: keys, Pass@1 ± SE over passes, gate criteria, nested metrics."""

import math

import pytest

from tasks.catalog import Catalog
from tasks.tracking.record import eval_points, gate_points, metric_key


def test_keys_are_slugs_trackers_accept() -> None:
    assert metric_key("hero", "gate", "Δ Pass@1 (CI low)") == "hero/gate/pass_1_ci_low"
    assert metric_key("ablations", "train", "dppo_prompt_mean_nudge", "sync_s") == (
        "ablations/train/dppo_prompt_mean_nudge/sync_s"
    )
    assert metric_key("x", "!!!") == "x/_"


def test_pass_at_1_is_the_mean_of_each_pass_share_with_its_standard_error(tmp_path) -> None:
    catalog = Catalog(tmp_path / "catalog.duckdb")
    solved = {0: [True, True, False, False], 1: [True, True, True, False]}  # pass 0: 2/4, pass 1: 3/4
    catalog.append(
        "evals",
        [
            {"stage": "hero", "suite": "heldout", "policy": "base", "task_id": f"t{i}", "pass_index": p, "passed": ok}
            for p, row in solved.items()
            for i, ok in enumerate(row)
        ],
    )
    points = {p.key: p.value for p in eval_points(catalog, "hero")}
    # mean (0.5 + 0.75) / 2 = 0.625; std over passes sqrt(2 × 0.125² / 1) = 0.1768; SE = 0.1768 / sqrt(2) = 0.125
    assert points["hero/eval/heldout/base/pass_at_1"] == pytest.approx(0.625)
    assert points["hero/eval/heldout/base/pass_at_1_se"] == pytest.approx(0.125)
    assert points["hero/eval/heldout/base/passes"] == 2 and points["hero/eval/heldout/base/trials"] == 8


def test_gate_points_carry_every_criterion_and_every_number_of_the_metrics() -> None:
    report = {
        "passed": False,
        "criteria": [
            {"name": "reward gain", "measured": 0.12, "op": ">=", "threshold": 0.1, "passed": True},
            {"name": "p value", "measured": None, "op": "<=", "threshold": 0.05, "passed": False},
        ],
        "metrics": {"delta_ci": [-0.01, 0.2], "arms": {"dppo": {"pass_at_1": 0.5}}, "note": "text", "nan": math.nan},
    }
    points = {p.key: p.value for p in gate_points("overfit", report)}
    assert points == {
        "overfit/gate/passed": 0.0,
        "overfit/gate/reward_gain": 0.12,
        "overfit/gate/reward_gain/threshold": 0.1,
        "overfit/gate/reward_gain/passed": 1.0,
        "overfit/gate/p_value/threshold": 0.05,  # not measured: no value, the verdict still goes
        "overfit/gate/p_value/passed": 0.0,
        "overfit/metrics/delta_ci/0": -0.01,
        "overfit/metrics/delta_ci/1": 0.2,
        "overfit/metrics/arms/dppo/pass_at_1": 0.5,
    }
