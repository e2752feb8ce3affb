"""The agent harnesses an eval runs through: ``HARNESSES`` maps each ``HarnessKind`` to a builder that opens what its
tasks' environments need (a sandbox pool goes on the eval's exit stack) and returns task → environment factory.

Only the MCP harness serves the policy's apps (through the stdio gateway in pooled sandboxes, or in-process:
``McpBackend``); the code-only and terminal harnesses have tools of their own. The MCP and code-only harnesses grade
``llm_judge`` criteria with the spec's judge (one ``LlmJudgeClient`` for the eval, closed with it; audited on its first
graded samples when the spec asks, ``envs.judge_audit``, the audit written beside the trials); terminal tasks are
graded by their verifiers.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from envs.files import atomic_write_text
from envs.graders import Judge
from envs.harness.agent import EnvsForTask
from envs.types import TaskSpec
from evals.errors import EvalConfigError
from evals.spec import EvalSpec, HarnessKind, McpBackend

Apps = Sequence[str] | None
HarnessBuilder = Callable[[EvalSpec, Apps, Sequence[TaskSpec], contextlib.AsyncExitStack], Awaitable[EnvsForTask]]
"""(spec, the policy's apps, tasks, exit stack) → task → env factory; shared resources (a sandbox pool) go on the
exit stack. Only the MCP harness serves apps; the code-only and terminal harnesses have tools of their own."""


def _worlds_root(spec: EvalSpec) -> Path:
    root = spec.tasks.worlds_root()
    if root is None:
        raise EvalConfigError(
            f"the {spec.harness.value} harness needs the tasks' worlds; "
            f"give a worlds folder for the {spec.tasks.kind.value} source"
        )
    if not root.is_dir():
        raise EvalConfigError(f"worlds folder {root} does not exist")
    return root


def _judge(spec: EvalSpec, stack: contextlib.AsyncExitStack) -> Judge | None:
    """The eval's judge client (closed with the eval), or None when the spec names no judge."""
    if spec.judge is None:
        return None
    from envs.judge import LlmJudgeClient

    client = LlmJudgeClient(spec.judge.config())
    stack.callback(client.close)
    if not spec.judge.audit_samples:
        return client
    from envs.judge_audit import JUDGE_AUDIT_FILE, AuditedJudge

    audited = AuditedJudge(client, spec.judge.model, spec.judge.audit_samples, spec.judge.audit_repeats)

    def write_audit() -> None:
        if audited.audit.samples:  # a resumed eval that judged nothing keeps the audit its first run wrote
            atomic_write_text(spec.out_dir / JUDGE_AUDIT_FILE, audited.audit.model_dump_json(indent=1))

    stack.callback(write_audit)
    return audited


async def _mcp_gateway(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.rollout import pooled_envs
    from envs.sandbox.base import SandboxOptions
    from envs.sandbox.local import LocalProvider
    from envs.sandbox.pool import SandboxPool

    root = _worlds_root(spec)
    world_ids = sorted({task.world_id for task in tasks})
    per_world = Counter(task.world_id for task in tasks)
    size = min(spec.concurrency, spec.passes * max(per_world.values()))
    pool = await stack.enter_async_context(
        SandboxPool(LocalProvider({w: root / w for w in world_ids}, SandboxOptions(apps=apps)), size_per_world=size)
    )
    judge = _judge(spec, stack)
    return lambda task: pooled_envs(pool, task, root, judge)


async def _mcp_in_process(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.rollout import local_envs

    root, judge = _worlds_root(spec), _judge(spec, stack)
    return lambda task: local_envs(task, root, apps, judge)


_MCP_BACKENDS: dict[McpBackend, HarnessBuilder] = {
    McpBackend.GATEWAY: _mcp_gateway,
    McpBackend.IN_PROCESS: _mcp_in_process,
}


async def _mcp(spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack) -> EnvsForTask:
    return await _MCP_BACKENDS[spec.mcp_backend](spec, apps, tasks, stack)


async def _code_only(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.harness.code_tools import code_only_envs

    root, judge = _worlds_root(spec), _judge(spec, stack)
    return lambda task: code_only_envs(task, root, judge=judge)


async def _terminal(
    spec: EvalSpec, apps: Apps, tasks: Sequence[TaskSpec], stack: contextlib.AsyncExitStack
) -> EnvsForTask:
    from envs.harness.terminal import terminal_envs

    return terminal_envs


HARNESSES: dict[HarnessKind, HarnessBuilder] = {
    HarnessKind.MCP: _mcp,
    HarnessKind.CODE_ONLY: _code_only,
    HarnessKind.TERMINAL: _terminal,
}
