"""The docker provider on a real daemon (``make test-docker``): one container per sandbox with the MCP gateway inside
over stdio, a warm pool that resets in place, no network, resource limits, and no container left after close, exit,
SIGTERM or SIGKILL. Skipped with the reason when no daemon answers or the image is not built (``make docker-base``)."""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envs.sandbox.base import SandboxError, SandboxOptions
from envs.sandbox.docker import DEFAULT_IMAGE, LABEL, OWNER_LABEL, DockerProvider, DockerSandbox, connect
from envs.sandbox.limits import ResourceLimits
from envs.sandbox.pool import SandboxPool

pytestmark = pytest.mark.docker
REPO = Path(__file__).parents[3]


@pytest.fixture(scope="module")
def daemon() -> Any:
    pytest.importorskip("docker", reason="the docker SDK is not installed (pip install rl-recipe[docker])")
    try:
        client = connect()
    except SandboxError as error:
        pytest.skip(f"{error} (`make test-docker` starts one)")
    from docker.errors import ImageNotFound

    try:
        client.images.get(DEFAULT_IMAGE)
    except ImageNotFound:
        pytest.skip(f"image {DEFAULT_IMAGE} is not built: run `make docker-base`")
    return client


def containers_of(client: Any, world_root: Path) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{LABEL}={world_root}"})


def test_one_container_per_sandbox_with_the_gateway_inside(daemon: Any, pristine_world: Path, tmp_path: Path) -> None:
    limits = ResourceLimits(memory_mb=256, max_processes=64)
    provider = DockerProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s", limits=limits))

    async def two_sandboxes() -> tuple[list[DockerSandbox], list[str], float]:
        started = time.perf_counter()
        sandboxes = [await provider.start("w1"), await provider.start("w1")]
        start_s = (time.perf_counter() - started) / 2
        try:
            await sandboxes[0].call("filesystem.write_file", {"path": "notes/a.txt", "content": "first"})
            read = [(await sandbox.call("filesystem.read_file", {"path": "notes/a.txt"})).text for sandbox in sandboxes]
            read.append((await sandboxes[1].call("code_exec.run_bash", {"command": "cat /proc/1/cmdline"})).text)
            return sandboxes, read, start_s
        finally:
            for sandbox in sandboxes:
                assert len(containers_of(daemon, sandbox.world_root)) == 1
            await asyncio.gather(*(sandbox.close() for sandbox in sandboxes))

    sandboxes, read, start_s = asyncio.run(two_sandboxes())
    print(f"container + gateway start: {start_s:.2f} s each")
    assert read[:2] == ["first", "alpha\n"]  # each container serves its own copy, written through the bind mount
    assert "sleep" in read[2]  # code_exec ran inside the container (its PID 1 is the image's idle command)
    assert sandboxes[0].container.id != sandboxes[1].container.id
    for sandbox in sandboxes:
        assert not containers_of(daemon, sandbox.world_root) and not sandbox.world_root.exists()


def test_container_has_no_network_and_the_limits(daemon: Any, pristine_world: Path, tmp_path: Path) -> None:
    limits = ResourceLimits(memory_mb=256, max_processes=64)
    provider = DockerProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s", limits=limits))

    async def probe() -> tuple[dict[str, Any], dict[str, str], list[tuple[int, bytes]]]:
        sandbox = await provider.start("w1")
        try:
            sandbox.container.reload()
            config = sandbox.container.attrs["HostConfig"]
            runs = [
                sandbox.container.exec_run(["python", "-c", code])
                for code in (
                    "import os; print(sorted(os.listdir('/sys/class/net')))",
                    "import socket; socket.create_connection(('192.0.2.1', 80), timeout=2)",
                    "b = bytearray(512 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])",
                    "import subprocess; [subprocess.Popen(['sleep', '5']) for _ in range(100)]",
                )
            ]
            return config, sandbox.container.labels, [(run.exit_code, run.output) for run in runs]
        finally:
            await sandbox.close()

    config, labels, runs = asyncio.run(probe())
    assert config["NetworkMode"] == "none"
    assert config["Memory"] == config["MemorySwap"] == 256 * 1024 * 1024 and config["PidsLimit"] == 64
    assert labels[OWNER_LABEL].endswith(labels[OWNER_LABEL].rpartition("/")[2])
    assert runs[0] == (0, b"['lo']\n")  # loopback only
    assert runs[1][0] == 1 and b"Network is unreachable" in runs[1][1]
    assert runs[2][0] == 137  # past the memory cap: OOM-killed
    assert runs[3][0] == 1 and b"Resource temporarily unavailable" in runs[3][1]  # past the pids cap


def test_warm_pool_resets_in_place_and_keeps_the_container(daemon: Any, pristine_world: Path, tmp_path: Path) -> None:
    provider = DockerProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s"))

    async def rollouts() -> tuple[list[str], list[str], dict[str, float], float]:
        async with SandboxPool(provider, size_per_world=2) as pool:
            ids, seen, rollout_s = [], [], []
            for _ in range(3):
                started = time.perf_counter()
                async with pool.acquire("w1") as sandbox:
                    ids.append(sandbox.container.id)
                    seen.append((await sandbox.call("filesystem.read_file", {"path": "notes/a.txt"})).text)
                    await sandbox.call("filesystem.write_file", {"path": "notes/a.txt", "content": "changed"})
                    await sandbox.call("code_exec.run_bash", {"command": "rm data/b.csv && echo x > new.txt"})
                rollout_s.append(time.perf_counter() - started)
            return ids, seen, pool.stats.summary(), statistics.median(rollout_s)

    ids, seen, stats, rollout_s = asyncio.run(rollouts())
    print(f"pool: {stats}; rollout (acquire, 3 calls, reset): {rollout_s:.3f} s")
    assert seen == ["alpha\n"] * 3  # every rollout starts pristine
    assert len(set(ids)) == 2  # the two warm containers take turns, reset in place, never restarted
    assert stats["starts"] == 2 and stats["acquires"] == 3 and stats["failed_resets"] == 0 and stats["replaced"] == 0
    assert not any(
        daemon.containers.list(all=True, filters={"id": id_}) for id_ in ids
    )  # the pool's close removed them
    assert not list((tmp_path / "s").rglob("w1-*"))


def test_pool_replaces_a_sandbox_whose_container_died(daemon: Any, pristine_world: Path, tmp_path: Path) -> None:
    provider = DockerProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s"))

    async def rollouts() -> tuple[str, dict[str, float]]:
        async with SandboxPool(provider, size_per_world=1) as pool:
            async with pool.acquire("w1") as sandbox:
                sandbox.container.kill()  # the gateway dies with its container
            async with pool.acquire("w1") as sandbox:
                return (await sandbox.call("filesystem.read_file", {"path": "notes/a.txt"})).text, pool.stats.summary()

    text, stats = asyncio.run(rollouts())
    assert text == "alpha\n" and stats["replaced"] + stats["failed_resets"] == 1 and stats["starts"] == 2


CHILD_SCRIPT = """
import asyncio, json, os, signal, sys
from pathlib import Path
from envs.sandbox.base import SandboxOptions
from envs.sandbox.docker import DockerProvider

async def main():
    provider = DockerProvider({"w1": Path(sys.argv[1])}, SandboxOptions(scratch=Path(sys.argv[2])))
    sandbox = await provider.start("w1")
    print(json.dumps({"root": str(sandbox.world_root), "id": sandbox.container.id}), flush=True)
    if sys.argv[3] == "exit":
        return  # the interpreter exits, the sandbox never closed
    os.kill(os.getpid(), getattr(signal, sys.argv[3]))
    await asyncio.sleep(30)

asyncio.run(main())
"""


def run_child(pristine_world: Path, scratch: Path, how: str) -> tuple[int, dict[str, str]]:
    child = subprocess.run(
        [sys.executable, "-c", CHILD_SCRIPT, str(pristine_world), str(scratch), how],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert child.stdout, child.stderr
    return child.returncode, json.loads(child.stdout)


@pytest.mark.parametrize(("how", "returncode"), [("exit", 0), ("SIGTERM", -signal.SIGTERM)])
def test_no_container_outlives_its_process(
    daemon: Any, pristine_world: Path, tmp_path: Path, how: str, returncode: int
) -> None:
    code, started = run_child(pristine_world, tmp_path / "s", how)
    assert code == returncode
    assert not daemon.containers.list(all=True, filters={"id": started["id"]})
    assert not Path(started["root"]).exists()


def test_containers_of_a_killed_process_are_swept(daemon: Any, pristine_world: Path, tmp_path: Path) -> None:
    code, started = run_child(pristine_world, tmp_path / "s", "SIGKILL")
    assert code == -signal.SIGKILL
    assert daemon.containers.list(all=True, filters={"id": started["id"]})  # no reaper runs on SIGKILL

    async def next_provider() -> None:
        sandbox = await DockerProvider({"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "s")).start("w1")
        await sandbox.close()

    asyncio.run(next_provider())
    assert not daemon.containers.list(all=True, filters={"id": started["id"]})
    assert not Path(started["root"]).exists()  # the scratch sweep took the copy (envs.scratch.owned_folder)
