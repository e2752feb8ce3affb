"""Oracle check: run every task's oracle on a private copy of its world and grade the result.

A task whose oracle does not reach reward 1 is not a valid task (step 1 of the recipe: de-risk the environment).
The oracle's tool calls go straight to the Python apps (``python``), or through the real MCP gateway: in-process
(``inmemory``) or as a stdio server in a warm local sandbox from the pool (``stdio``, several worlds at once), as
rollouts do. Every call is recorded (``ToolCallRecord``: tool, ok, error class, returned nothing, latency), so the
de-risk stage can compute per-tool failure and empty-on-success rates over calls whose arguments are known to be right.
``variants`` puts known-bad tool variants (``envs.mcp.variants``) in front of the apps on the MCP transports.

Harbor tasks pass the same gate with Harbor's two reference agents (``check_harbor_tasks``): ``oracle`` must score 1
and ``nop`` (doing nothing) must score 0, or the task is invalid; under bubblewrap (``local``) or in containers built
from the tasks' images (``docker``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from envs.apps import ToolError, World
from envs.byo.probes import ServerCheck, check_servers, planned_probes, run_planned
from envs.byo.spec import server_set_of
from envs.graders import grade
from envs.harness.harbor_docker import run_reference_agent_docker
from envs.harness.terminal import ReferenceAgent, ReferenceRun, run_reference_agent
from envs.harness.tools import GatewayToolSession, ToolOutcome, app_outcome, call_record
from envs.mcp.servers import mcp_name
from envs.mcp.variants import BadVariant
from envs.options import OracleTransport
from envs.oracle import OracleRun, require_oracle, run_oracle
from envs.probes import run_probes
from envs.sandbox.world_copy import fork_world
from envs.scratch import scratch_dir
from envs.types import TaskSpec, ToolCallRecord


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
    tool_calls: tuple[ToolCallRecord, ...] = field(default=())


@dataclass(frozen=True)
class ProbeCall:
    """One tool probe (``envs.probes``; ``envs.byo.probes`` for a world of a team's own servers) on one world."""

    world_id: str
    record: ToolCallRecord
    known_good: bool = True
    """False for a schema probe that needed placeholder arguments: its error may be theirs, not the tool's."""


@dataclass(frozen=True)
class EnvironmentCheck:
    oracles: list[OracleCheck]
    probes: list[ProbeCall]
    servers: list[ServerCheck] = field(default_factory=list)
    """Each MCP server of each world of a team's own environment, started alone (none for the generated worlds)."""


Scored = tuple[float, bool, str | None]  # score, passed, why not
Report = Callable[[OracleCheck], None]


class _CallLog:
    """Every call one oracle run makes, in order."""

    def __init__(self) -> None:
        self.records: list[ToolCallRecord] = []

    def record(self, name: str, args: dict[str, Any], outcome: ToolOutcome) -> None:
        self.records.append(call_record(len(self.records), mcp_name(name), args, outcome))

    def direct(self, world: World) -> Callable[[str, dict[str, Any]], str]:
        """A caller over the Python apps (the ``python`` transport) that records each call and raises on errors."""

        def call(name: str, args: dict[str, Any]) -> str:
            outcome = app_outcome(world, name, args)
            self.record(name, args, outcome)
            if outcome.is_error:
                raise ToolError(outcome.text)
            return outcome.text

        return call


def _graded(task: TaskSpec, run: OracleRun, pristine: Path, after: Path) -> Scored:
    result = grade(task, run.answer, pristine, after)
    return result.score, result.passed, "; ".join(c.detail for c in result.criteria if not c.passed) or None


def _failed(exc: Exception) -> Scored:
    # One broken task must not hide the others: record why and go on.
    return 0.0, False, f"{type(exc).__name__}: {exc}"


def _record(task: TaskSpec, started: float, scored: Scored, calls: _CallLog) -> OracleCheck:
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
        tool_calls=tuple(calls.records),
    )


def check_task(task: TaskSpec, worlds_root: Path) -> OracleCheck:
    started, pristine, calls = time.perf_counter(), worlds_root / task.world_id, _CallLog()
    with scratch_dir(f"oracle-{task.task_id}-") as scratch:
        try:
            world = World(fork_world(pristine, Path(scratch) / task.world_id))
            run = run_oracle(require_oracle(task), calls.direct(world))
            scored = _graded(task, run, pristine, world.root)
        except Exception as exc:
            scored = _failed(exc)
    return _record(task, started, scored, calls)


async def _check_inmemory(
    tasks: list[TaskSpec], worlds_root: Path, report: Report, variants: frozenset[BadVariant]
) -> tuple[list[ProbeCall], list[ServerCheck]]:
    from envs.mcp.client import GatewayClient, Transport
    from envs.mcp.oracle import run_oracle_via

    for task in tasks:  # sequential: each session's cancel scopes must close in the task that opened them
        started, pristine, calls = time.perf_counter(), worlds_root / task.world_id, _CallLog()
        with scratch_dir(f"oracle-{task.task_id}-") as scratch:
            try:
                copy = fork_world(pristine, Path(scratch) / task.world_id)
                async with GatewayClient(Transport.INMEMORY, world=copy, variants=variants) as client:
                    run = await run_oracle_via(client, require_oracle(task), calls.record)
                scored = _graded(task, run, pristine, copy)
            except Exception as exc:
                scored = _failed(exc)
        report(_record(task, started, scored, calls))
    probes = []
    for world_id in _world_ids(tasks):
        with scratch_dir(f"probe-{world_id}-") as scratch:
            copy = fork_world(worlds_root / world_id, Path(scratch) / world_id)
            async with GatewayClient(Transport.INMEMORY, world=copy, variants=variants) as client:
                probes += [ProbeCall(world_id, record) for record in await run_probes(client.call)]
    return probes, []


STDIO_WORLDS_AT_ONCE = 4
"""Worlds whose oracles the stdio check runs at once. Each world's tasks go one after another through its sandbox;
while one world's gateway answers (or the grader reads its files) another's can, so the two cores both work."""


async def _check_stdio(
    tasks: list[TaskSpec], worlds_root: Path, report: Report, variants: frozenset[BadVariant]
) -> tuple[list[ProbeCall], list[ServerCheck]]:
    from envs.mcp.oracle import run_oracle_via
    from envs.sandbox.base import Sandbox, SandboxOptions
    from envs.sandbox.local import LocalProvider
    from envs.sandbox.pool import SandboxPool

    own = {world_id: server_set_of(worlds_root / world_id) for world_id in _world_ids(tasks)}  # None: our apps
    servers: list[ServerCheck] = []
    for world_id, server_set in own.items():
        if server_set is not None:
            servers += await check_servers(world_id, worlds_root / world_id, server_set)
    broken = {check.world_id for check in servers if check.error}
    world_ids = [world_id for world_id in _world_ids(tasks) if world_id not in broken]  # nothing there would start
    provider = LocalProvider(
        {world_id: worlds_root / world_id for world_id in world_ids}, SandboxOptions(variants=variants)
    )
    by_world: dict[str, list[TaskSpec]] = {world_id: [] for world_id in world_ids}
    for task in tasks:
        if task.world_id in by_world:
            by_world[task.world_id].append(task)
    at_once = asyncio.Semaphore(STDIO_WORLDS_AT_ONCE)
    probes: dict[str, list[ProbeCall]] = {}

    async def check_task_in(pool: SandboxPool, task: TaskSpec) -> None:
        started, pristine, calls = time.perf_counter(), worlds_root / task.world_id, _CallLog()
        async with pool.acquire(task.world_id) as sandbox:  # reset to pristine when released
            try:
                run = await run_oracle_via(sandbox.client, require_oracle(task), calls.record)
                scored = _graded(task, run, pristine, sandbox.world_root)
            except Exception as exc:
                scored = _failed(exc)
        report(_record(task, started, scored, calls))

    async def probe(sandbox: Sandbox) -> list[ProbeCall]:
        world_id = sandbox.world_id
        if own[world_id] is None:
            return [ProbeCall(world_id, record) for record in await run_probes(sandbox.client.call)]
        planned = planned_probes(own[world_id], await GatewayToolSession(sandbox.client).list_tools())
        done = await run_planned(sandbox.client.call, planned, sandbox.world_root / "filesystem")
        return [ProbeCall(world_id, record, known_good) for record, known_good in done]

    async def check_world(pool: SandboxPool, world_id: str) -> None:
        async with at_once:
            for task in by_world[world_id]:
                if task.oracle is not None:  # a team's own task may have none: probes stand in (envs.byo.probes)
                    await check_task_in(pool, task)
            async with pool.acquire(world_id) as sandbox:
                probes[world_id] = await probe(sandbox)

    async with SandboxPool(provider, size_per_world=1) as pool, asyncio.TaskGroup() as group:
        for world_id in world_ids:
            group.create_task(check_world(pool, world_id))
    return [probe for world_id in world_ids for probe in probes[world_id]], servers


McpCheck = Callable[
    [list[TaskSpec], Path, Report, frozenset[BadVariant]], Awaitable[tuple[list[ProbeCall], list[ServerCheck]]]
]
_MCP_CHECKS: dict[OracleTransport, McpCheck] = {
    OracleTransport.INMEMORY: _check_inmemory,
    OracleTransport.STDIO: _check_stdio,
}


def _world_ids(tasks: Iterable[TaskSpec]) -> list[str]:
    return sorted({task.world_id for task in tasks})


def _probe_directly(tasks: list[TaskSpec], worlds_root: Path) -> list[ProbeCall]:
    probes = []
    for world_id in _world_ids(tasks):
        with scratch_dir(f"probe-{world_id}-") as scratch:
            world = World(fork_world(worlds_root / world_id, Path(scratch) / world_id))

            async def call(name: str, args: dict[str, Any], world: World = world) -> ToolOutcome:
                return app_outcome(world, name, args)

            probes += [ProbeCall(world_id, record) for record in asyncio.run(run_probes(call))]
    return probes


def check_environment(
    tasks: Iterable[TaskSpec],
    worlds_root: Path,
    on_result: Report | None = None,
    transport: OracleTransport = OracleTransport.PYTHON,
    variants: frozenset[BadVariant] = frozenset(),
) -> EnvironmentCheck:
    """Every task's oracle (``on_result`` sees each as it finishes), then the tool probes on every world."""
    tasks = list(tasks)
    results: list[OracleCheck] = []

    def report(result: OracleCheck) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    own = [world_id for world_id in _world_ids(tasks) if server_set_of(worlds_root / world_id) is not None]
    if own and transport is not OracleTransport.STDIO:
        raise ValueError(f"worlds {own} are served by their own MCP servers: check them with the stdio transport")
    servers: list[ServerCheck] = []
    if transport is OracleTransport.PYTHON:
        if variants:
            raise ValueError("known-bad variants live in the MCP gateway: use the inmemory or stdio transport")
        for task in tasks:
            report(check_task(task, worlds_root))
        probes = _probe_directly(tasks, worlds_root)
    else:
        probes, servers = asyncio.run(_MCP_CHECKS[transport](tasks, worlds_root, report, variants))
    order = {task.task_id: index for index, task in enumerate(tasks)}  # the stdio check finishes worlds out of order
    return EnvironmentCheck(sorted(results, key=lambda result: order[result.task_id]), probes, servers)


# --- Harbor tasks ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HarborCheck:
    """Harbor's reference agents on one task: valid when ``oracle`` scores 1 and ``nop`` scores 0."""

    task_id: str
    oracle_reward: float
    nop_reward: float
    seconds: float
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None and self.oracle_reward == 1.0 and self.nop_reward == 0.0


class HarborProvider(StrEnum):
    LOCAL = "local"  # bubblewrap: the Dockerfile's COPY / RUN steps followed in a host folder
    DOCKER = "docker"  # a container from the task's image (envs.harness.harbor_docker)


REFERENCE_RUNNERS: dict[HarborProvider, Callable[[TaskSpec, ReferenceAgent], ReferenceRun]] = {
    HarborProvider.LOCAL: run_reference_agent,
    HarborProvider.DOCKER: run_reference_agent_docker,
}


def check_harbor_task(task: TaskSpec, provider: HarborProvider = HarborProvider.LOCAL) -> HarborCheck:
    started, rewards, error = time.perf_counter(), {agent: 0.0 for agent in ReferenceAgent}, None
    for agent in ReferenceAgent:
        try:
            rewards[agent] = REFERENCE_RUNNERS[provider](task, agent).reward
        except Exception as exc:  # one broken task must not hide the others
            error = f"{agent}: {type(exc).__name__}: {exc}"
            break
    oracle, nop = rewards[ReferenceAgent.ORACLE], rewards[ReferenceAgent.NOP]
    return HarborCheck(task.task_id, oracle, nop, time.perf_counter() - started, error)


def check_harbor_tasks(
    tasks: Iterable[TaskSpec],
    on_result: Callable[[HarborCheck], None] | None = None,
    provider: HarborProvider = HarborProvider.LOCAL,
) -> list[HarborCheck]:
    """``check_harbor_task`` for each task (``on_result`` sees each as it finishes)."""
    results = []
    for task in tasks:
        results.append(check_harbor_task(task, provider))
        if on_result is not None:
            on_result(results[-1])
    return results
