"""Local sandboxes: world copies restored in place, pool isolation between rollouts, the reaper."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envs.sandbox.base import SandboxError, SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.sandbox.registry import make_provider
from envs.sandbox.world_copy import Pristine, ResetReport, WorldCopy
from envs.scratch import processes_of


def test_restore_undoes_every_kind_of_change(pristine_world: Path, tmp_path: Path) -> None:
    copy = WorldCopy.create(Pristine.scan(pristine_world), tmp_path / "copy")
    fs = copy.root / "filesystem"
    (fs / "notes" / "a.txt").write_text("changed\n")  # changed in place
    (fs / "new.txt").write_text("added")  # added file
    (fs / "extra" / "deep").mkdir(parents=True)  # added folders (2)
    (fs / "data" / "b.csv").unlink()  # deleted file
    mailbox = copy.root / "apps_data" / "mail" / "mailbox.json"
    before = mailbox.stat()
    mailbox.write_text('{"messages": [1]}')  # same length, mtime put back: only ctime and the hash tell
    os.utime(mailbox, ns=(before.st_atime_ns, before.st_mtime_ns))

    report = copy.restore()

    assert report == ResetReport(restored=3, removed=3)
    assert (fs / "notes" / "a.txt").read_text() == "alpha\n" and (fs / "data" / "b.csv").read_text() == "x,y\n1,2\n"
    assert json.loads(mailbox.read_text()) == {"messages": []}
    assert sorted(p.relative_to(copy.root).as_posix() for p in copy.root.rglob("*")) == sorted(
        p.relative_to(pristine_world).as_posix() for p in pristine_world.rglob("*")
    )
    assert copy.restore() == ResetReport(restored=0, removed=0)  # nothing left to do


def test_restore_replaces_a_folder_where_a_file_was(pristine_world: Path, tmp_path: Path) -> None:
    copy = WorldCopy.create(Pristine.scan(pristine_world), tmp_path / "copy")
    target = copy.root / "filesystem" / "notes" / "a.txt"
    target.unlink()
    (target / "inner").mkdir(parents=True)
    copy.restore()
    assert target.read_text() == "alpha\n"


def test_copy_is_private(pristine_world: Path, tmp_path: Path) -> None:
    copy = WorldCopy.create(Pristine.scan(pristine_world), tmp_path / "copy")
    (copy.root / "filesystem" / "notes" / "a.txt").write_text("mine")
    assert (pristine_world / "filesystem" / "notes" / "a.txt").read_text() == "alpha\n"


def test_unknown_world_and_bad_folder(pristine_world: Path, tmp_path: Path) -> None:
    provider = LocalProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s"))
    with pytest.raises(SandboxError, match=r"unknown world 'nope'; this provider serves: w1"):
        asyncio.run(provider.start("nope"))
    with pytest.raises(SandboxError, match="has no filesystem/"):
        Pristine.scan(tmp_path)
    with pytest.raises(ValueError, match="unknown sandbox provider 'kvm'; providers are: local, docker"):
        make_provider("kvm", {})


def test_provider_apps_decide_the_tools_a_sandbox_serves(pristine_world: Path, tmp_path: Path) -> None:
    async def listed() -> list[str]:
        provider = LocalProvider(
            {"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s", apps=("filesystem", "sheets"))
        )
        async with SandboxPool(provider, size_per_world=1) as pool, pool.acquire("w1") as sandbox:
            return [tool.name for tool in await sandbox.client.list_tools()]

    names = asyncio.run(listed())
    assert names and {name.split("_", 1)[0] for name in names} == {"filesystem", "sheets"}
    with pytest.raises(ValueError, match=r"unknown apps \['spreadsheets'\]; apps are: "):
        LocalProvider({"w1": pristine_world}, SandboxOptions(apps=("filesystem", "spreadsheets")))


def test_pool_rollouts_never_see_each_others_writes(pristine_world: Path, tmp_path: Path) -> None:
    async def rollouts() -> tuple[list[str], dict[str, float]]:
        provider = LocalProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "scratch"))
        async with SandboxPool(provider, size_per_world=1) as pool:
            async with pool.acquire("w1") as first:
                await first.call("filesystem.write_file", {"path": "notes/a.txt", "content": "rollout 1"})
                await first.call("filesystem.write_file", {"path": "added/new.txt", "content": "x"})
                await first.call("code_exec.run_bash", {"command": "rm data/b.csv"})
                root = first.world_root
            async with pool.acquire("w1") as second:
                assert second.world_root == root  # the same warm sandbox, reset
                seen = [
                    (await second.call("filesystem.read_file", {"path": "notes/a.txt"})).text,
                    (await second.call("filesystem.list_files", {})).text,
                ]
            return seen, pool.stats.summary()

    seen, stats = asyncio.run(rollouts())
    assert seen[0] == "alpha\n"
    assert seen[1].split() == ["data/", "data/b.csv", "notes/", "notes/a.txt"]
    assert stats["acquires"] == 2 and stats["starts"] == 1 and stats["failed_resets"] == 0
    assert not list((tmp_path / "scratch").iterdir())  # closing the pool deleted the copy


REAPED_SCRIPT = """
import asyncio, json, os, signal, sys
from pathlib import Path
from envs.sandbox.base import SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.scratch import processes_of

async def main():
    provider = LocalProvider({"w1": Path(sys.argv[1])}, SandboxOptions(scratch=Path(sys.argv[2])))
    sandbox = await provider.start("w1")
    print(json.dumps({"root": str(sandbox.world_root), "pids": processes_of(sandbox.world_root)}), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # dies here, the sandbox never closed
    await asyncio.sleep(30)

asyncio.run(main())
"""


def test_reaper_kills_gateways_of_a_terminated_process(pristine_world: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    child = subprocess.run(
        [sys.executable, "-c", REAPED_SCRIPT, str(pristine_world), str(scratch)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).parents[3],
    )
    assert child.returncode == -signal.SIGTERM, child.stderr
    started = json.loads(child.stdout)
    assert started["pids"], "the gateway process was not found while the sandbox ran"
    deadline = time.monotonic() + 5
    while processes_of(Path(started["root"])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes_of(Path(started["root"]))
    assert not Path(started["root"]).exists()
