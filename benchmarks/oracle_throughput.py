"""Rollout-equivalent throughput: N oracle runs through the MCP gateway in pooled stdio sandboxes, all in flight at
once, against the same N runs one after another on the same pool. An oracle run is the tool-call half of a
rollout (acquire a pristine sandbox, every tool call over stdio MCP, grade against the pristine world, reset).

    .venv/bin/python benchmarks/oracle_throughput.py --runs 64 --per-world 4
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from envs.build import build_environment, load_tasks
from envs.graders import grade
from envs.mcp.oracle import run_oracle_via
from envs.oracle import require_oracle
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.types import TaskSpec


async def one_run(pool: SandboxPool, task: TaskSpec, worlds: Path) -> bool:
    async with pool.acquire(task.world_id) as sandbox:
        run = await run_oracle_via(sandbox.client, require_oracle(task))
        return grade(task, run.answer, worlds / task.world_id, sandbox.world_root).passed


async def measure(tasks: list[TaskSpec], worlds: Path, per_world: int) -> dict[str, float]:
    provider = LocalProvider({world_id: worlds / world_id for world_id in {t.world_id for t in tasks}})
    async with SandboxPool(provider, size_per_world=per_world) as pool:
        started = time.perf_counter()
        sequential = [await one_run(pool, task, worlds) for task in tasks]
        sequential_s = time.perf_counter() - started
        started = time.perf_counter()
        parallel = await asyncio.gather(*(one_run(pool, task, worlds) for task in tasks))
        parallel_s = time.perf_counter() - started
    if not (all(sequential) and all(parallel)):
        raise SystemExit("an oracle run failed: the benchmark measures only correct runs")
    return {"sequential_s": sequential_s, "parallel_s": parallel_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=64)
    parser.add_argument("--per-world", type=int, default=4, help="warm sandboxes per world in the pool")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        build_environment(data)
        # A mix of every world, tier and app, the same tasks in both modes.
        all_tasks = load_tasks(data)
        tasks = [all_tasks[i * len(all_tasks) // args.runs] for i in range(args.runs)]
        result = asyncio.run(measure(tasks, data / "worlds", args.per_world))
    n = len(tasks)
    print(f"{n} oracle runs over stdio MCP in pooled sandboxes ({args.per_world} per world)")
    print(f"  sequential: {result['sequential_s']:.2f} s  ({n / result['sequential_s']:.1f} runs/s)")
    print(f"  parallel:   {result['parallel_s']:.2f} s  ({n / result['parallel_s']:.1f} runs/s)")
    print(f"  parallel / sequential throughput: {result['sequential_s'] / result['parallel_s']:.2f}x")


if __name__ == "__main__":
    main()
