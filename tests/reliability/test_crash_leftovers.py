"""What a crash leaves behind: world copies of a SIGKILLed process are swept (and what still ran in them killed);
checkpoints are fsynced before their rename, a truncated or damaged one raises an error naming the file, and resume
falls back to the previous good checkpoint; a damaged step history names itself."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envs.sandbox.base import SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.scratch import owned_folder, owner_tag, sweep_stale
from tests.processes import running
from trainer.local import CheckpointError, LocalTrainer, TrainerConfig, load_latest_checkpoint, save_checkpoint
from trainer.local import checkpoint as checkpoints
from trainer.loops.history import HISTORY_FILE, LoopHistory, ResumeError, StepRecord
from trainer.model import TinyModelSpec, bootstrap_policy

KILLED_MID_ROLLOUT = """
import os, signal, subprocess, sys
from pathlib import Path
{setup}
sleeper = subprocess.Popen(  # a child left running in the copy (a code_exec launch that outlives its parent)
    ["sleep", "60"], cwd=world, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
print(world, sleeper.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _killed_process(setup: str) -> tuple[Path, int]:
    """Run ``setup`` (which makes ``world``) in a process that is SIGKILLed mid-rollout; its world and orphan pid."""
    script = KILLED_MID_ROLLOUT.format(setup=textwrap.dedent(setup))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == -9, result.stderr
    world, pid = result.stdout.split()
    assert Path(world).is_dir()
    return Path(world), int(pid)


@pytest.fixture
def pristine(tmp_path: Path) -> Path:
    root = tmp_path / "pristine" / "w1"
    (root / "filesystem").mkdir(parents=True)
    (root / "apps_data").mkdir()
    (root / "filesystem" / "a.txt").write_text("alpha\n")
    return root


def test_a_pool_start_sweeps_the_sandbox_copies_of_a_killed_process(pristine: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "sandboxes"
    left, orphan = _killed_process(
        f"""
        import shutil
        from envs.scratch import owned_folder  # where LocalProvider.new_copy puts a copy (without importing MCP)
        world = shutil.copytree({str(pristine)!r}, owned_folder(Path({str(scratch)!r})) / "w1-0123456789ab")
        """
    )

    async def start_a_pool() -> list[Path]:
        provider = LocalProvider({"w1": pristine}, SandboxOptions(scratch=scratch, apps=("filesystem",)))
        async with SandboxPool(provider) as pool, pool.acquire("w1") as sandbox:
            return [sandbox.world_root]

    try:
        (mine,) = asyncio.run(start_a_pool())
        assert not left.exists() and not running(orphan)
        assert mine.parent.name == owner_tag()  # its own copies live in its owner folder ...
        assert not mine.exists()  # ... and go as it closes
    finally:
        if running(orphan):
            os.kill(orphan, 9)


def test_forked_worlds_of_a_killed_process_are_swept_and_live_owners_kept(pristine: Path, tmp_path: Path) -> None:
    root = tmp_path / "scratch"
    left, orphan = _killed_process(
        f"""
        from envs.sandbox.world_copy import fork_world
        from envs.scratch import scratch_dir
        scratch = scratch_dir("rollout-t1-0-", Path({str(root)!r})).__enter__()
        world = fork_world(Path({str(pristine)!r}), scratch / "w1")
        """
    )
    try:
        swept = sweep_stale(root)
        assert [folder.name for folder in swept] == [left.parents[1].name]
        assert not left.exists() and not running(orphan)
        mine = owned_folder(root)  # this (live) process's scratch under the same root is never swept
        assert sweep_stale(root) == [] and mine.is_dir()
    finally:
        if running(orphan):
            os.kill(orphan, 9)


# --- checkpoints ------------------------------------------------------------------------------------------------------

SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=64)


@pytest.fixture(scope="module")
def policy():
    return bootstrap_policy([f"deal {i}: {i * 3 % 50} shares at {i % 9}.5 usd" for i in range(60)], SPEC, 300)


def _trainer(policy) -> LocalTrainer:
    return LocalTrainer(copy.deepcopy(policy[0]), TrainerConfig(lr=1e-3))


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


@pytest.mark.parametrize("damaged", ["trainer_state.pt", "policy/model.safetensors", "meta.json"])
def test_a_damaged_checkpoint_is_named_and_resume_falls_back(policy, tmp_path: Path, caplog, damaged: str) -> None:
    trainer = _trainer(policy)
    for step in (1, 2):
        save_checkpoint(tmp_path, trainer, step, data_cursor=step * 10, tokenizer=policy[1])
    _truncate(tmp_path / "step-00000002" / damaged)

    with pytest.raises(CheckpointError, match=f"checkpoint file {tmp_path / 'step-00000002' / damaged} is truncated"):
        checkpoints.load_checkpoint(tmp_path / "step-00000002", _trainer(policy))

    resumed = _trainer(policy)
    with caplog.at_level(logging.WARNING):
        info = load_latest_checkpoint(tmp_path, resumed)
    assert info is not None and info.step == 1 and info.data_cursor == 10 and resumed.step == 1
    assert "step-00000002" in caplog.text and damaged.rpartition("/")[2] in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged-step-00000002", "step-00000001"]


def test_no_loadable_checkpoint_is_an_error_naming_them(policy, tmp_path: Path) -> None:
    save_checkpoint(tmp_path, _trainer(policy), 1, data_cursor=0, tokenizer=policy[1])
    (tmp_path / "step-00000001" / "meta.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"no checkpoint under .* can be loaded: .*step-00000001/meta.json"):
        load_latest_checkpoint(tmp_path, _trainer(policy))


def test_a_checkpoint_is_fsynced_before_it_is_renamed_into_place(policy, tmp_path: Path, monkeypatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync:" + os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(source, target) -> None:
        events.append(f"replace:{target}")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = save_checkpoint(tmp_path, _trainer(policy), 3, data_cursor=0, tokenizer=policy[1])
    renamed = events.index(f"replace:{target}")
    synced = {Path(event.split(":", 1)[1]).name for event in events[:renamed] if event.startswith("fsync:")}
    assert {"trainer_state.pt", "meta.json", "model.safetensors", "config.json"} <= synced
    assert f"fsync:{tmp_path}" in events[renamed:]  # the rename itself made durable


def test_a_damaged_step_history_names_its_file(tmp_path: Path) -> None:
    history = LoopHistory(kind="sync", steps=[])
    record = StepRecord(
        step=1, wall_s=1.0, reward_mean=0.5, pass_rate=0.5, trajectories=4, groups_dropped=0, trained=True
    )
    history.steps.append(record)
    history.save(tmp_path)
    assert LoopHistory.resume(tmp_path, "sync", 1).steps == [record]
    text = (tmp_path / HISTORY_FILE).read_text()
    (tmp_path / HISTORY_FILE).write_text(text[: len(text) // 2])  # cut short
    with pytest.raises(ResumeError, match=f"the step history {tmp_path / HISTORY_FILE} is damaged"):
        LoopHistory.resume(tmp_path, "sync", 1)
    assert json.loads(text)["kind"] == "sync"
