"""Where a group's samples run: environment factories for ``envs.harness.agent.run_group``.

Every rollout gets a private, pristine world and a grader bound to it (``grade(task, answer, pristine, copy)``).
Two factories, one contract (``EnvFactory``):

* ``pooled_envs(pool, task, worlds_root)`` — a warm sandbox from a ``SandboxPool``: the MCP gateway over stdio, code
  execution under resource limits; reset to pristine when released. What training and evals use.
* ``local_envs(task, worlds_root, apps)`` — a temporary world copy and the apps called in-process
  (``LocalToolSession``). No MCP, no sandbox: for unit tests and the tiny model's bootstrap, where thousands of
  short rollouts would otherwise pay the gateway round trip.

Example::

    async with SandboxPool(LocalProvider(worlds_by_id), size_per_world=8) as pool:
        trajectories = await run_group(task, pooled_envs(pool, task, worlds_root), engine, tokenizer, config,
                                       group_id="step3-task17", n=8)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from envs.apps import World
from envs.check import fork_world
from envs.graders import grade
from envs.harness.agent import EnvFactory, SampleEnv
from envs.harness.tools import GatewayToolSession, LocalToolSession
from envs.sandbox.pool import SandboxPool
from envs.scratch import scratch_dir
from envs.types import TaskSpec


def pooled_envs(pool: SandboxPool, task: TaskSpec, worlds_root: Path) -> EnvFactory:
    pristine = worlds_root / task.world_id

    @asynccontextmanager
    async def open_env(sample_index: int) -> AsyncIterator[SampleEnv]:
        async with pool.acquire(task.world_id) as sandbox:
            after = sandbox.world_root
            yield SampleEnv(GatewayToolSession(sandbox.client), lambda answer: grade(task, answer, pristine, after))

    return open_env


def local_envs(task: TaskSpec, worlds_root: Path, apps: Sequence[str] | None = None) -> EnvFactory:
    pristine = worlds_root / task.world_id
    if not pristine.is_dir():
        raise FileNotFoundError(f"world {task.world_id} of task {task.task_id} is not under {worlds_root}")

    @asynccontextmanager
    async def open_env(sample_index: int) -> AsyncIterator[SampleEnv]:
        with scratch_dir(f"rollout-{task.task_id}-{sample_index}-") as scratch:
            copy = fork_world(pristine, Path(scratch) / task.world_id)
            async with LocalToolSession(World(copy), apps=apps) as tools:
                yield SampleEnv(tools, lambda answer: grade(task, answer, pristine, copy))

    return open_env
