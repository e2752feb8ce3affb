"""Where a group's samples run: environment factories for ``envs.harness.agent.run_group``.

Every rollout gets a private, pristine world and a grader bound to it (``grade(task, answer, pristine, copy, judge)``;
the judge, when given, decides the task's ``llm_judge`` criteria).
Two factories, one contract (``EnvFactory``):

* ``pooled_envs(pool, task, worlds_root)`` — a warm sandbox from a ``SandboxPool``: the MCP gateway over stdio, code
  execution under resource limits; reset to pristine when released. What training and evals use.
* ``local_envs(task, worlds_root, apps)`` — a temporary world copy and the apps called in-process
  (``LocalToolSession``; a world of a team's own MCP servers gets those, started on the copy: ``tool_session``).
  No MCP for the apps, no sandbox: for unit tests and the tiny model's bootstrap, where thousands of
  short rollouts would otherwise pay the gateway round trip.

``local_envs`` and the code-only harness's ``code_only_envs`` are both ``copy_envs``: a world copy per sample and the
tool session a caller opens on it.

Example::

    async with SandboxPool(LocalProvider(worlds_by_id), size_per_world=8) as pool:
        agent = AgentSetup(engine, tokenizer, config)
        trajectories = await run_group(task, pooled_envs(pool, task, worlds_root), agent, group_id="step3-task17", n=8)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from envs.graders import Judge, grade
from envs.harness.agent import EnvFactory, SampleEnv
from envs.harness.tools import GatewayToolSession, ToolSession, tool_session
from envs.sandbox.pool import SandboxPool
from envs.sandbox.world_copy import fork_world
from envs.scratch import scratch_dir
from envs.types import TaskSpec


def pooled_envs(pool: SandboxPool, task: TaskSpec, worlds_root: Path, judge: Judge | None = None) -> EnvFactory:
    pristine = worlds_root / task.world_id

    @asynccontextmanager
    async def open_env(sample_index: int) -> AsyncIterator[SampleEnv]:
        async with pool.acquire(task.world_id) as sandbox:
            after = sandbox.world_root
            tools = GatewayToolSession(sandbox.client)
            yield SampleEnv(tools, lambda answer: grade(task, answer, pristine, after, judge))

    return open_env


ToolsOnCopy = Callable[[Path], AbstractAsyncContextManager[ToolSession]]
"""Opens a sample's tool session on its world copy."""


def copy_envs(
    task: TaskSpec, worlds_root: Path, open_tools: ToolsOnCopy, label: str, judge: Judge | None = None
) -> EnvFactory:
    """Each sample: a private copy of the task's world in a scratch folder named after ``label``, the tools
    ``open_tools`` opens on it, graded against the pristine world."""
    pristine = worlds_root / task.world_id
    if not pristine.is_dir():
        raise FileNotFoundError(f"world {task.world_id} of task {task.task_id} is not under {worlds_root}")

    @asynccontextmanager
    async def open_env(sample_index: int) -> AsyncIterator[SampleEnv]:
        with scratch_dir(f"{label}-{task.task_id}-{sample_index}-") as scratch:
            copy = fork_world(pristine, Path(scratch) / task.world_id)
            async with open_tools(copy) as tools:
                yield SampleEnv(tools, lambda answer: grade(task, answer, pristine, copy, judge))

    return open_env


def local_envs(
    task: TaskSpec, worlds_root: Path, apps: Sequence[str] | None = None, judge: Judge | None = None
) -> EnvFactory:
    return copy_envs(task, worlds_root, lambda copy: tool_session(copy, apps), "rollout", judge)
