"""The DuckDB catalog: trajectories with their turns and tool calls, per-stage clearing, queries."""

from pathlib import Path

import pytest

from envs.types import AnswerEquals, Domain, Split, TaskSpec, Tier, ToolCallRecord, Trajectory, TurnSpan
from tasks.catalog import Catalog
from tasks.training import step_row
from trainer.algorithms import MechanismActivity
from trainer.loops import StepRecord


def trajectory(task_id: str, reward: float) -> Trajectory:
    return Trajectory(
        task_id=task_id, group_id="g", tokens=[1, 2, 3, 4], loss_mask=[0, 0, 1, 1], logprobs=[0, 0, -0.5, -0.25],
        prompt_len=2, turns=[TurnSpan(turn=0, start=2, end=4, finish_reason="stop", weight_version=3)],
        tool_calls=[ToolCallRecord(turn=0, tool="sheets_read_cell", args={"cell": "B2"}, ok=False, error_class="Err")],
        reward=reward, weight_versions=[3],
    )  # fmt: skip


def test_trajectories_round_trip_with_turns_and_calls(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.duckdb")
    task = TaskSpec(task_id="t", world_id="w", domain=Domain.GENERAL, tier=Tier.TOY, split=Split.TRAIN, prompt="p",
                    rubric=[AnswerEquals(expected="x")])  # fmt: skip
    ids = catalog.add_trajectories(
        "derisk", "base-rollouts", "base", [trajectory("t", 1.0), trajectory("t", 0.0)], {"t": task}
    )
    assert ids == [1, 2]
    assert catalog.add_trajectories("overfit", "train/overfit", "overfit", [trajectory("u", 0.5)], {}, step=4) == [3]
    [row] = catalog.query("SELECT * FROM trajectories WHERE id = 1")
    assert row["tokens"] == [1, 2, 3, 4] and row["loss_mask"] == [0, 0, 1, 1] and row["logprobs"] == [0, 0, -0.5, -0.25]
    assert (row["world_id"], row["tier"], row["n_generated"], row["weight_version_min"]) == ("w", "toy", 2, 3)
    assert catalog.count("turns") == 3 and catalog.count("tool_calls", "derisk") == 2
    [step] = catalog.query("SELECT step, world_id FROM trajectories WHERE stage = 'overfit'")
    assert step == {"step": 4, "world_id": None}
    catalog.clear_stage("derisk")
    assert catalog.count("trajectories") == 1 and catalog.count("tool_calls") == 1


def test_unknown_columns_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"gates has no columns \['typo'\]"):
        Catalog(tmp_path / "c.duckdb").append("gates", [{"stage": "x", "typo": 1}])


def test_a_step_record_with_its_mechanism_activity_fits_the_train_steps_table(tmp_path: Path) -> None:
    record = StepRecord(
        step=1, wall_s=1.0, reward_mean=0.5, pass_rate=0.5, trajectories=4, groups_dropped=0, trained=True,
        activity=MechanismActivity(nudges_inserted=2),
    )  # fmt: skip
    catalog = Catalog(tmp_path / "c.duckdb")
    catalog.replace_step(step_row("ablations", "dppo", record))  # the activity stays in history.json
    assert catalog.query("SELECT run, step, trained FROM train_steps") == [{"run": "dppo", "step": 1, "trained": True}]
