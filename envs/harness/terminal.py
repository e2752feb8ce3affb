"""The terminal harness: Harbor-format tasks (Terminal-Bench style) with one ``bash`` tool and the task's verifier.

RECIPE "Evaluation": "other tasks / other harness". A Harbor task folder (``envs.loaders.load_harbor``) holds
``instruction.md``, ``task.toml``, ``environment/Dockerfile`` (and its build context), ``tests/test.sh`` (the
verifier) and ``solution/solve.sh`` (the oracle), and runs here unchanged (``envs.harness.harbor``): the agent's
``bash`` works in ``/app`` (the Dockerfile's WORKDIR), never seeing ``/tests`` or ``/solution``; the verifier runs
``bash /tests/test.sh`` and writes ``/logs/verifier/reward.txt`` or ``reward.json``, read by
``envs.graders.read_verifier_reward`` (the ``verifier_reward`` criterion of every Harbor task).

Harbor's two reference agents check that a task is valid (``run_reference_agent``): ``oracle`` runs
``bash /solution/solve.sh`` and must score 1, ``nop`` does nothing and must score 0.

Example::

    task = bundled_terminal_tasks()[0]
    assert run_terminal_oracle(task).passed            # /solution/solve.sh in a fresh sandbox, then the verifier
    agent = AgentSetup(engine, tokenizer, config, harness="terminal")
    trajectories = await run_group(task, terminal_envs(task), agent, group_id="tb", n=4)
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from envs.apps.code_exec import ExecResult
from envs.graders import grade
from envs.harness.agent import EnvFactory, SampleEnv
from envs.harness.code_tools import DEFAULT_BASH_TIMEOUT_S, BashArgs, CodeTool, RegistryToolSession
from envs.harness.harbor import (
    HarborSandbox,
    Phase,
    create_sandbox,
    harbor_task_dir,
    oracle_phase,
    phase_command,
    run_in_phase,
    run_verifier,
    task_limits,
    upload,
    verifier_reward,
)
from envs.loaders import load_harbor_dir
from envs.sandbox.limits import ResourceLimits
from envs.scratch import scratch_dir
from envs.types import GradeResult, TaskSpec

__all__ = [
    "BUNDLED_TERMINAL_TASKS",
    "ReferenceAgent",
    "ReferenceRun",
    "TerminalToolSession",
    "bundled_terminal_tasks",
    "grade_terminal",
    "run_reference_agent",
    "run_terminal_oracle",
    "terminal_envs",
]

BUNDLED_TERMINAL_TASKS = Path(__file__).resolve().parents[1] / "terminal_tasks"


def bundled_terminal_tasks() -> list[TaskSpec]:
    """The Harbor tasks shipped in ``envs/terminal_tasks/`` (sorted by name)."""
    return load_harbor_dir(BUNDLED_TERMINAL_TASKS)


TERMINAL_TOOLS: dict[str, CodeTool] = {
    "bash": CodeTool(
        "bash",
        "Run a bash command line in the task's working folder (its input files are there; write your results there "
        "too). Standard Unix tools (awk, sed, grep, sort, find, ...) and `python3` are available; there is no "
        'network. Returns "exit_code: N", then the "stdout:" and "stderr:" sections (each cut to its first and last '
        "10 000 bytes); on timeout the process and its children are killed.",
        BashArgs,
        lambda session, args: session.bash(args.command, args.timeout_s),
    )
}


class TerminalToolSession(RegistryToolSession):
    """One ``bash`` tool in the sandbox's working folder (``/app``), as the agent phase sees it."""

    def __init__(self, sandbox: HarborSandbox, limits: ResourceLimits | None = None) -> None:
        super().__init__(TERMINAL_TOOLS)
        self.sandbox = sandbox
        self.limits = limits

    def bash(self, command: str, timeout_s: float = DEFAULT_BASH_TIMEOUT_S) -> ExecResult:
        return run_in_phase(self.sandbox, Phase.AGENT, command, timeout_s, self.limits)

    def hide_paths(self, text: str) -> str:
        return text.replace(str(self.sandbox.workdir), self.sandbox.cwd)


def grade_terminal(
    task: TaskSpec, sandbox: HarborSandbox, answer: str | None, limits: ResourceLimits | None = None
) -> GradeResult:
    """Run the verifier, then grade the task's rubric (its ``verifier_reward`` reads ``logs/verifier/``)."""
    run_verifier(task, sandbox, limits)
    # A Harbor task has no pristine world to diff against: its rubric reads only the sandbox's verifier logs.
    return grade(task, answer, sandbox.root, sandbox.root)


def terminal_envs(task: TaskSpec, limits: ResourceLimits | None = None) -> EnvFactory:
    """Each sample: a fresh sandbox, the ``bash`` tool in it, graded by the task's verifier."""
    harbor_task_dir(task)  # fail at once (as a task error) for a task that is not a Harbor folder

    @asynccontextmanager
    async def open_env(sample_index: int) -> AsyncIterator[SampleEnv]:
        sample_limits = task_limits(task, limits)
        with scratch_dir(f"terminal-{task.task_id}-{sample_index}-") as scratch:
            sandbox = create_sandbox(task, Path(scratch) / "sandbox", sample_limits)
            async with TerminalToolSession(sandbox, sample_limits) as tools:
                yield SampleEnv(tools, lambda answer: grade_terminal(task, sandbox, answer, sample_limits))

    return open_env


# --- Harbor's reference agents ----------------------------------------------------------------------------------------


class ReferenceAgent(StrEnum):
    ORACLE = "oracle"  # bash /solution/solve.sh: a valid task scores 1
    NOP = "nop"  # does nothing: a valid task scores 0


@dataclass(frozen=True)
class ReferenceRun:
    agent: ReferenceAgent
    grade: GradeResult
    reward: float  # the verifier's reward as Harbor reads it (partial credit kept)
    seconds: float


def _oracle(task: TaskSpec, sandbox: HarborSandbox, limits: ResourceLimits) -> None:
    def run() -> tuple[ExecResult, float]:
        upload(task, sandbox, Phase.ORACLE)
        command, timeout_s = phase_command(task, Phase.ORACLE)
        return run_in_phase(sandbox, Phase.ORACLE, command, timeout_s, limits), timeout_s

    oracle_phase(task, run)


REFERENCE_AGENTS: dict[ReferenceAgent, Callable[[TaskSpec, HarborSandbox, ResourceLimits], None]] = {
    ReferenceAgent.ORACLE: _oracle,
    ReferenceAgent.NOP: lambda task, sandbox, limits: None,
}


def run_reference_agent(task: TaskSpec, agent: ReferenceAgent, limits: ResourceLimits | None = None) -> ReferenceRun:
    """``agent`` in a fresh sandbox, then the verifier (the oracle's ``/solution`` is gone by then, as in Harbor)."""
    started, limits = time.perf_counter(), task_limits(task, limits)
    with scratch_dir(f"terminal-{agent}-{task.task_id}-") as scratch:
        sandbox = create_sandbox(task, Path(scratch) / "sandbox", limits)
        REFERENCE_AGENTS[agent](task, sandbox, limits)
        graded = grade_terminal(task, sandbox, None, limits)
        return ReferenceRun(agent, graded, verifier_reward(sandbox), time.perf_counter() - started)


def run_terminal_oracle(task: TaskSpec, limits: ResourceLimits | None = None) -> GradeResult:
    """The oracle agent's grade (``OracleError`` when ``solve.sh`` is missing or fails)."""
    return run_reference_agent(task, ReferenceAgent.ORACLE, limits).grade
