"""Shards: what a job writes is what the stage reads, each step once, whatever was killed and resumed."""

from pathlib import Path

import pytest

from envs.types import StopReason, Trajectory
from trainer.cluster.shards import ShardError, ShardReader, ShardWriter
from trainer.loops.history import StepRecord


def record(step: int, reward: float = 0.5) -> StepRecord:
    shape = {"pass_rate": 0.0, "trajectories": 2, "groups_dropped": 0, "trained": True}
    return StepRecord(step=step, wall_s=float(step), reward_mean=reward, **shape)


def rollout(task: str, reward: float) -> Trajectory:
    sampled = {"tokens": [1, 2, 3], "loss_mask": [0, 1, 1], "logprobs": [0.0, -0.5, -0.25], "prompt_len": 1}
    return Trajectory(task_id=task, group_id="g", reward=reward, stop_reason=StopReason.STOP, **sampled)


def test_a_step_and_its_rollouts_come_back_whole_and_once(tmp_path: Path) -> None:
    writer, reader = ShardWriter(tmp_path), ShardReader(tmp_path)
    writer.rollouts(1, [rollout("a", 1.0), rollout("b", 0.0)])
    writer.step(record(1))
    writer.rollouts(1, [rollout("c", 1.0)])  # a second report of step 1 (the rollouts after the last step)
    [step] = reader.changed()
    assert step.step == 1 and step.record == record(1)
    assert [t.task_id for t in step.trajectories] == ["a", "b", "c"]
    assert reader.changed() == []  # nothing new
    writer.step(record(2))
    assert [s.step for s in reader.changed()] == [2]


def test_a_resumed_job_replaces_what_the_killed_one_wrote_for_a_step(tmp_path: Path) -> None:
    killed = ShardWriter(tmp_path)
    killed.rollouts(3, [rollout("a", 0.0)])
    killed.rollouts(3, [rollout("b", 0.0)])
    killed.step(record(3, reward=0.0))
    reader = ShardReader(tmp_path)
    assert reader.changed()[0].record.reward_mean == 0.0
    resumed = ShardWriter(tmp_path)  # a new process re-runs step 3 from the checkpoint at step 2
    resumed.rollouts(3, [rollout("c", 1.0)])
    resumed.step(record(3, reward=1.0))
    [step] = reader.changed()
    assert step.record.reward_mean == 1.0 and [t.task_id for t in step.trajectories] == ["c"]


def test_files_being_written_are_not_read(tmp_path: Path) -> None:
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / ".000001.json.x.tmp").write_text("{half a rec")
    assert ShardReader(tmp_path).changed() == []


def test_a_shard_from_other_code_is_one_line_naming_the_file(tmp_path: Path) -> None:
    writer = ShardWriter(tmp_path)
    writer.rollouts(1, [rollout("a", 1.0)])
    [path] = (tmp_path / "rollouts").glob("*.jsonl")
    path.write_text(path.read_text().replace('"task_id"', '"a_field_this_code_lacks": 0, "task_id"'))
    with pytest.raises(ShardError, match=r"shard .*\.jsonl does not read as this code's records .*changed while"):
        ShardReader(tmp_path).changed()
