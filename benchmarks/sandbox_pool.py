"""Sandbox costs: a warm pool's acquire + reset against starting a fresh stdio gateway, and the tool-call round trip
per transport (inmemory / stdio / http).

The world is synthetic: ``--files`` text files of ``--file-kb`` KiB in nested folders, plus an empty mailbox. A
"fresh start" is ``LocalProvider.start`` + ``close`` (copy the world, launch the gateway, MCP handshake, tear down);
a "pool cycle" is ``acquire`` + one write + the reset on release (restores only the changed file). Round trips are
``filesystem.read_file`` on one small file, after one warm-up call; p50 and p99 over ``--calls`` calls.

    .venv/bin/python benchmarks/sandbox_pool.py --starts 5 --cycles 50 --calls 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from envs.mcp.client import GatewayClient, Transport, gateway_command
from envs.mcp.gateway import HTTP_PATH
from envs.net import free_port
from envs.sandbox.base import SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool

READ_ARGS = {"path": "notes/readme.txt"}


def build_world(root: Path, files: int, file_kb: int) -> Path:
    (root / "apps_data" / "mail").mkdir(parents=True)
    (root / "apps_data" / "mail" / "mailbox.json").write_text(json.dumps({"messages": []}))
    for i in range(files):
        file = root / "filesystem" / f"dept{i % 5}" / f"doc{i:03d}.txt"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text((f"line {i}\n" * (file_kb * 128))[: file_kb * 1024])
    (root / "filesystem" / "notes").mkdir()
    (root / "filesystem" / "notes" / "readme.txt").write_text("hello\n")
    return root


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile: the value at rank ceil(q * n) of the sorted values."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -int(-q * len(ordered)) - 1))]


async def timed(fn: Callable[[], Awaitable[object]], repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        await fn()
        timings.append(time.perf_counter() - started)
    return timings


async def sandbox_timings(world: Path, scratch: Path, starts: int, cycles: int) -> dict[str, list[float]]:
    provider = LocalProvider({"w": world}, SandboxOptions(scratch=scratch))

    async def fresh() -> None:
        await (await provider.start("w")).close()

    async with SandboxPool(provider, size_per_world=1) as pool:

        async def cycle() -> None:
            async with pool.acquire("w") as sandbox:
                await sandbox.call("filesystem.write_file", {"path": "notes/readme.txt", "content": "changed"})

        cycle_s = await timed(cycle, cycles)
        reset_s = list(pool.stats.reset_s)
    return {"fresh start + close": await timed(fresh, starts), "pool acquire + reset": cycle_s, "reset alone": reset_s}


def wait_for_http(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the HTTP gateway exited with code {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"the HTTP gateway did not answer at {url} within {timeout_s:g} s")


async def round_trips(world: Path, transport: Transport, calls: int) -> list[float]:
    if transport is not Transport.HTTP:
        async with GatewayClient(transport, world=world) as client:
            await client.call("filesystem.read_file", READ_ARGS)
            return await timed(lambda: client.call("filesystem.read_file", READ_ARGS), calls)
    port = free_port()
    command = gateway_command(world, Transport.HTTP, port=port)
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        try:
            url = f"http://127.0.0.1:{port}{HTTP_PATH}"
            wait_for_http(url, process)
            async with GatewayClient(Transport.HTTP, url=url) as client:
                await client.call("filesystem.read_file", READ_ARGS)
                return await timed(lambda: client.call("filesystem.read_file", READ_ARGS), calls)
        finally:
            process.terminate()
            process.wait(timeout=10)


def row(name: str, values: list[float]) -> str:
    p50, p99 = statistics.median(values) * 1e3, quantile(values, 0.99) * 1e3
    return f"| {name:<28} | {len(values):>5} | {p50:>9.2f} | {p99:>9.2f} |"


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="sandbox-bench-") as tmp:
        world = build_world(Path(tmp) / "world", args.files, args.file_kb)
        lifecycle = await sandbox_timings(world, Path(tmp) / "scratch", args.starts, args.cycles)
        trips = {str(t): await round_trips(world, t, args.calls) for t in Transport}
    header = (
        f"| {'measure':<28} | {'n':>5} | {'p50 ms':>9} | {'p99 ms':>9} |\n|{'-' * 30}|{'-' * 7}|{'-' * 11}|{'-' * 11}|"
    )
    print(f"world: {args.files} files x {args.file_kb} KiB\n\n{header}")
    for name, values in lifecycle.items():
        print(row(name, values))
    for transport, values in trips.items():
        print(row(f"round trip {transport}", values))
    fresh, pooled = (statistics.median(lifecycle[k]) for k in ("fresh start + close", "pool acquire + reset"))
    print(f"\nfresh start / pool cycle (p50): {fresh / pooled:.0f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="fresh sandboxes started and closed")
    parser.add_argument("--cycles", type=int, default=50, help="pool acquire + write + reset cycles")
    parser.add_argument("--calls", type=int, default=200, help="tool calls per transport")
    parser.add_argument("--files", type=int, default=100, help="files in the synthetic world")
    parser.add_argument("--file-kb", type=int, default=16, help="size of each file, KiB")
    asyncio.run(main(parser.parse_args()))
