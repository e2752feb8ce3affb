"""Red-team finding 12 (docs/reliability.md): shard ingest from a job's folder on shared storage — a stray file, a
second name for a step, bytes that are not text — each ends in one line or one warning, and a step counts once."""

from pathlib import Path

import pytest

from tests.trainer.cluster.test_shards import record, rollout
from trainer.cluster.shards import ShardError, ShardReader, ShardWriter


def test_stray_files_are_skipped_and_a_step_is_counted_once(tmp_path: Path, caplog) -> None:
    """Red-team finding 12 (docs/reliability.md): a stray ``steps/notes.json`` raised ``int('notes')``, and a second
    name for the same step (``2-0.jsonl`` beside ``000002-0.jsonl``) doubled that step's rows."""
    writer, reader = ShardWriter(tmp_path), ShardReader(tmp_path)
    writer.step(record(2))
    writer.rollouts(2, [rollout("a", 1.0)])
    (tmp_path / "steps" / "notes.json").write_text("{}")
    (tmp_path / "rollouts" / "2-0.jsonl").write_text((tmp_path / "rollouts" / "000002-0.jsonl").read_text())
    [step] = reader.changed()
    assert step.step == 2 and [t.task_id for t in step.trajectories] == ["a"]
    skipped = [r.getMessage() for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 2 and reader.changed() == []  # each stray file warned about once


def test_a_shard_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "000001-0.jsonl").write_bytes(b'{"task_id": "\xff\xfe"}\n')
    with pytest.raises(ShardError, match=r"000001-0.jsonl is not UTF-8 text \(byte 0xff at offset 13\)") as raised:
        ShardReader(tmp_path).changed()
    assert "\n" not in str(raised.value)
