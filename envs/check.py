"""Oracle check: run every task's oracle on a private copy of its world and grade the result.

A task whose oracle does not reach reward 1 is not a valid task (step 1 of the recipe: de-risk the environment).
The oracle's tool calls go straight to the Python apps (``python``), or through the real MCP gateway: in-process
(``inmemory``) or as a stdio server in a warm local sandbox from the pool (``stdio``), as rollouts do.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from envs.apps import World, call_tool
from envs.graders import grade
from envs.oracle import OracleRun, require_oracle, run_oracle
from envs.types import TaskSpec


class OracleTransport(StrEnum):
    PYTHON = "python"  # envs.apps.call_tool in this process
    INMEMORY = "inmemory"  # the MCP gateway over its in-process transport
    STDIO = "stdio"  # the MCP gateway as a stdio server in a pooled local sandbox


@dataclass(frozen=True)
class OracleCheck:
    task_id: str
    domain: str
    tier: str
    split: str
    passed: bool
    score: float
    seconds: float
    error: str | None = None


Scored = tuple[float, bool, str | None]  # score, passed, why not
Report = Callable[[OracleCheck], None]


def fork_world(pristine: Path, dest: Path) -> Path:
    """A private, writable copy of a pristine world for one rollout."""
    shutil.copytree(pristine, dest, symlinks=True)
    return dest


def _graded(task: TaskSpec, run: OracleRun, pristine: Path, after: Path) -> Scored:
    result = grade(task, run.answer, pristine, after)
    return result.score, result.passed, "; ".join(c.detail for c in result.criteria if not c.passed) or None


def _failed(exc: Exception) -> Scored:
    # One broken task must not hide the others: record why and go on.
    return 0.0, False, f"{type(exc).__name__}: {exc}"


def _record(task: TaskSpec, started: float, scored: Scored) -> OracleCheck:
    score, passed, error = scored
    return OracleCheck(
        task_id=task.task_id,
        domain=str(task.domain),
        tier=str(task.tier),
        split=str(task.split),
        passed=passed,
        score=score,
        seconds=time.perf_counter() - started,
        error=error,
    )


def check_task(task: TaskSpec, worlds_root: Path) -> OracleCheck:
    started, pristine = time.perf_counter(), worlds_root / task.world_id
    with tempfile.TemporaryDirectory(prefix=f"oracle-{task.task_id}-") as scratch:
        try:
            world = World(fork_world(pristine, Path(scratch) / task.world_id))
            run = run_oracle(require_oracle(task), lambda name, args: call_tool(world, name, args))
            scored = _graded(task, run, pristine, world.root)
        except Exception as exc:
            scored = _failed(exc)
    return _record(task, started, scored)


async def _check_inmemory(tasks: list[TaskSpec], worlds_root: Path, report: Report) -> None:
    from envs.mcp.client import GatewayClient, Transport
    from envs.mcp.oracle import run_oracle_via

    for task in tasks:  # sequential: each session's cancel scopes must close in the task that opened them
        started, pristine = time.perf_counter(), worlds_root / task.world_id
        with tempfile.TemporaryDirectory(prefix=f"oracle-{task.task_id}-") as scratch:
            try:
                copy = fork_world(pristine, Path(scratch) / task.world_id)
                async with GatewayClient(Transport.INMEMORY, world=copy) as client:
                    run = await run_oracle_via(client, require_oracle(task))
                scored = _graded(task, run, pristine, copy)
            except Exception as exc:
                scored = _failed(exc)
        report(_record(task, started, scored))


async def _check_stdio(tasks: list[TaskSpec], worlds_root: Path, report: Report) -> None:
    from envs.mcp.oracle import run_oracle_via
    from envs.sandbox.local import LocalProvider
    from envs.sandbox.pool import SandboxPool

    world_ids = sorted({task.world_id for task in tasks})
    provider = LocalProvider({world_id: worlds_root / world_id for world_id in world_ids})
    async with SandboxPool(provider, size_per_world=1) as pool:
        for task in tasks:
            started, pristine = time.perf_counter(), worlds_root / task.world_id
            async with pool.acquire(task.world_id) as sandbox:  # reset to pristine when released
                try:
                    run = await run_oracle_via(sandbox.client, require_oracle(task))
                    scored = _graded(task, run, pristine, sandbox.world_root)
                except Exception as exc:
                    scored = _failed(exc)
            report(_record(task, started, scored))


_MCP_CHECKS: dict[OracleTransport, Callable[[list[TaskSpec], Path, Report], Awaitable[None]]] = {
    OracleTransport.INMEMORY: _check_inmemory,
    OracleTransport.STDIO: _check_stdio,
}


def check_oracles(
    tasks: Iterable[TaskSpec],
    worlds_root: Path,
    on_result: Report | None = None,
    transport: OracleTransport = OracleTransport.PYTHON,
) -> list[OracleCheck]:
    results: list[OracleCheck] = []

    def report(result: OracleCheck) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    if transport is OracleTransport.PYTHON:
        for task in tasks:
            report(check_task(task, worlds_root))
    else:
        asyncio.run(_MCP_CHECKS[transport](list(tasks), worlds_root, report))
    return results
