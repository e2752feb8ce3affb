"""Step history: mechanism activity is carried per step, summed/averaged over the run, and old files still load."""

import json

import pytest

from trainer.algorithms import MechanismActivity
from trainer.loops.history import HISTORY_FILE, LoopHistory, StepRecord

SHAPE = {"wall_s": 1.0, "reward_mean": 0.5, "pass_rate": 0.5, "trajectories": 4, "groups_dropped": 0}


def test_a_history_written_before_activity_was_recorded_loads_without_it(tmp_path):
    old = {"kind": "sync", "steps": [{"step": 1, "trained": True, **SHAPE}]}
    (tmp_path / HISTORY_FILE).write_text(json.dumps(old))
    history = LoopHistory.resume(tmp_path, "sync", 1)
    assert history.steps[0].activity is None
    assert history.activity() is None  # not measured, which is not the same as measured zero


def test_run_activity_sums_nudges_and_averages_shares_over_the_steps_that_measured_one(tmp_path):
    steps = [
        StepRecord(step=1, trained=True, activity=MechanismActivity(nudges_inserted=1, dppo_masked_share=0.1), **SHAPE),
        StepRecord(step=2, trained=False, **SHAPE),  # every group tied: no optimizer step, no activity
        StepRecord(step=3, trained=True, activity=MechanismActivity(nudges_inserted=2, dppo_masked_share=0.3), **SHAPE),
    ]
    LoopHistory(kind="sync", steps=steps).save(tmp_path)
    history = LoopHistory.resume(tmp_path, "sync", 3)
    assert history.steps == steps  # round-trips through history.json
    total = history.activity()
    assert total is not None
    assert (total.nudges_inserted, total.dppo_masked_share) == (3, pytest.approx(0.2))
