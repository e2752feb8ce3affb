"""The terminal harness: Harbor-format tasks (Terminal-Bench style) with one ``bash`` tool and the task's verifier.

RECIPE "Evaluation": "other tasks / other harness". A Harbor task folder (``envs.loaders.load_harbor``) holds
``instruction.md``, ``task.toml`` (``[agent]`` / ``[verifier]`` ``timeout_sec``), ``environment/`` (the input files),
``tests/test.sh`` (the verifier) and ``solution/solve.sh`` (the oracle). Harbor runs these in a container; we have
none, so a sample runs in a sandbox folder::

    sandbox/app/              a copy of environment/ (empty when the task has none): the agent's working and only
                              writable folder under bubblewrap
    sandbox/tests/            tests/, copied in only after the agent is done (the agent never sees the verifier)
    sandbox/logs/verifier/    what Harbor mounts as /logs/verifier: reward.txt or reward.json, test-stdout.txt

The verifier is ``bash tests/test.sh`` run with ``TASK_DIR`` (the working folder), ``LOGS_DIR`` (the verifier logs)
and ``TESTS_DIR`` in its environment, so a test script written as ``"${LOGS_DIR:-/logs/verifier}"`` works both here
and in a Harbor container. The reward is read by ``envs.graders.read_verifier_reward`` (the ``verifier_reward``
criterion of every Harbor task).

Example::

    task = bundled_terminal_tasks()[0]
    assert run_terminal_oracle(task).passed            # solution/solve.sh through the bash tool, then the verifier
    trajectories = await run_group(task, terminal_envs(task), engine, tokenizer, config, group_id="tb", n=4,
                                   harness="terminal")
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from envs.apps.code_exec import MAX_TIMEOUT_S, ExecResult, run_limited
from envs.graders import VERIFIER_LOGS, grade
from envs.harness.agent import EnvFactory, SampleEnv
from envs.harness.code_tools import DEFAULT_BASH_TIMEOUT_S, BashArgs, CodeTool, RegistryToolSession, run_bash
from envs.loaders import HARBOR_SOLUTION_SCRIPT, HARBOR_TEST_SCRIPT, load_harbor_dir
from envs.oracle import OracleError
from envs.sandbox.limits import ResourceLimits
from envs.scratch import scratch_dir
from envs.types import GradeResult, TaskSpec

__all__ = [
    "BUNDLED_TERMINAL_TASKS",
    "TerminalSandbox",
    "TerminalToolSession",
    "bundled_terminal_tasks",
    "create_sandbox",
    "grade_terminal",
    "run_terminal_oracle",
    "run_verifier",
    "terminal_envs",
]

BUNDLED_TERMINAL_TASKS = Path(__file__).resolve().parents[1] / "terminal_tasks"
DEFAULT_VERIFIER_TIMEOUT_S = 120.0  # Harbor's own default when task.toml sets no [verifier] timeout_sec
VERIFIER_OUTPUT = "test-stdout.txt"


def bundled_terminal_tasks() -> list[TaskSpec]:
    """The Harbor tasks shipped in ``envs/terminal_tasks/`` (sorted by name)."""
    return load_harbor_dir(BUNDLED_TERMINAL_TASKS)


def harbor_task_dir(task: TaskSpec) -> Path:
    """The task folder a Harbor ``TaskSpec`` was loaded from (``metadata["task_dir"]``)."""
    folder = task.metadata.get("task_dir")
    if task.metadata.get("source") != "harbor" or not folder:
        raise ValueError(f"task {task.task_id} is not a Harbor task (load it with envs.loaders.load_harbor)")
    path = Path(folder)
    if not path.is_dir():
        raise FileNotFoundError(f"the folder of Harbor task {task.task_id} is gone: {path}")
    return path


@dataclass(frozen=True)
class TerminalSandbox:
    root: Path

    @property
    def workdir(self) -> Path:
        return self.root / "app"

    @property
    def tests(self) -> Path:
        return self.root / "tests"

    @property
    def logs(self) -> Path:
        return self.root / VERIFIER_LOGS


def create_sandbox(task: TaskSpec, root: Path) -> TerminalSandbox:
    """A fresh sandbox under ``root`` (which must not exist yet) with the task's ``environment/`` as working folder."""
    sandbox = TerminalSandbox(root.resolve())
    environment = harbor_task_dir(task) / "environment"
    root.mkdir(parents=True)
    if environment.is_dir():
        shutil.copytree(environment, sandbox.workdir, symlinks=True)
    else:
        sandbox.workdir.mkdir()
    return sandbox


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
    """One ``bash`` tool in a sandbox's working folder (the only writable folder under bubblewrap)."""

    def __init__(self, sandbox: TerminalSandbox, limits: ResourceLimits | None = None) -> None:
        super().__init__(TERMINAL_TOOLS)
        self.sandbox = sandbox
        self.limits = limits

    def bash(self, command: str, timeout_s: float = DEFAULT_BASH_TIMEOUT_S) -> ExecResult:
        workdir = self.sandbox.workdir
        return run_bash(command, cwd=workdir, writable=workdir, timeout_s=timeout_s, limits=self.limits)

    def hide_paths(self, text: str) -> str:
        return text.replace(f"{self.sandbox.workdir}/", "").replace(str(self.sandbox.workdir), ".")


def run_verifier(task: TaskSpec, sandbox: TerminalSandbox, limits: ResourceLimits | None = None) -> ExecResult:
    """Copy the task's ``tests/`` in (replacing whatever is there), clear the verifier logs, run ``tests/test.sh``
    with the verifier timeout; its output is kept in ``logs/verifier/test-stdout.txt``."""
    source = harbor_task_dir(task) / "tests"
    shutil.rmtree(sandbox.tests, ignore_errors=True)
    shutil.copytree(source, sandbox.tests)
    shutil.rmtree(sandbox.logs, ignore_errors=True)  # a reward file left by the agent must never count
    sandbox.logs.mkdir(parents=True)
    timeout_s = min(task.metadata.get("verifier_timeout_sec") or DEFAULT_VERIFIER_TIMEOUT_S, MAX_TIMEOUT_S)
    env = {"TASK_DIR": str(sandbox.workdir), "LOGS_DIR": str(sandbox.logs), "TESTS_DIR": str(sandbox.tests)}
    script = sandbox.root / HARBOR_TEST_SCRIPT
    result = run_limited([shutil.which("bash") or "/bin/bash", str(script)], sandbox.root, timeout_s, env, limits)
    (sandbox.logs / VERIFIER_OUTPUT).write_text(result.render(timeout_s))
    return result


def grade_terminal(
    task: TaskSpec, sandbox: TerminalSandbox, answer: str | None, limits: ResourceLimits | None = None
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
        with scratch_dir(f"terminal-{task.task_id}-{sample_index}-") as scratch:
            sandbox = create_sandbox(task, Path(scratch) / "sandbox")
            async with TerminalToolSession(sandbox, limits) as tools:
                yield SampleEnv(tools, lambda answer: grade_terminal(task, sandbox, answer, limits))

    return open_env


def run_terminal_oracle(task: TaskSpec, limits: ResourceLimits | None = None) -> GradeResult:
    """Run ``solution/solve.sh`` through the bash tool in a fresh sandbox (with the agent timeout), then the verifier.

    The script is read from the task folder rather than from ``task.oracle``: ``envs.oracle.run_oracle`` would read
    the shell's own ``$var`` / ``${var}`` as its ``${name}`` references.
    """
    solution = harbor_task_dir(task) / HARBOR_SOLUTION_SCRIPT
    if not solution.is_file():
        raise OracleError(f"Harbor task {task.task_id} has no {HARBOR_SOLUTION_SCRIPT}")
    timeout_s = min(task.metadata.get("agent_timeout_sec") or DEFAULT_BASH_TIMEOUT_S, MAX_TIMEOUT_S)
    with scratch_dir(f"terminal-oracle-{task.task_id}-") as scratch:
        sandbox = create_sandbox(task, Path(scratch) / "sandbox")
        result = TerminalToolSession(sandbox, limits).bash(solution.read_text(), timeout_s)
        if result.exit_code != 0 or result.timed_out:
            raise OracleError(f"{HARBOR_SOLUTION_SCRIPT} of {task.task_id} failed: {result.render(timeout_s)[-2000:]}")
        return grade_terminal(task, sandbox, None, limits)
