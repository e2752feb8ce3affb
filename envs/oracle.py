"""Run a task's oracle: its scripted tool calls, in order, with ``${name}`` data flow between steps.

The oracle never knows the expected answer: every value in its final answer comes out of a tool's output.
``run_oracle`` takes the tool-calling function as an argument so the same script runs against the plain Python
apps (``envs.apps.call_tool``), or through an MCP gateway in a sandbox.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from string import Template
from typing import Any

from envs.types import Oracle, OracleStep, TaskSpec

ToolCaller = Callable[[str, dict[str, Any]], str]


class OracleError(RuntimeError):
    """The oracle script could not run to its end (a tool failed, a reference or an extraction was missing)."""


@dataclass
class OracleRun:
    answer: str | None
    saved: dict[str, str] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)


def substitute(value: Any, saved: dict[str, str]) -> Any:
    """Replace ``${name}`` in every string inside ``value`` (recursing into lists and dicts)."""
    if isinstance(value, str):
        try:
            return Template(value).substitute(saved)
        except KeyError as missing:
            raise OracleError(f"reference ${{{missing.args[0]}}} is not saved by an earlier step") from None
    if isinstance(value, list):
        return [substitute(item, saved) for item in value]
    if isinstance(value, dict):
        return {key: substitute(item, saved) for key, item in value.items()}
    return value


def _extract(step: OracleStep, output: str) -> str:
    if step.extract is None:
        return output.strip()
    match = re.search(step.extract, output, flags=re.MULTILINE)
    if match is None:
        raise OracleError(f"{step.tool}: pattern {step.extract!r} not found in output {output[:200]!r}")
    return (match.group(1) if match.groups() else match.group(0)).strip()


def run_oracle(oracle: Oracle, call_tool: ToolCaller) -> OracleRun:
    run = OracleRun(answer=None)
    for index, step in enumerate(oracle.steps):
        args = substitute(step.args, run.saved)
        try:
            output = call_tool(step.tool, args)
        except Exception as error:
            raise OracleError(f"step {index} ({step.tool}) failed: {error}") from error
        run.outputs.append(output)
        if step.save_as:
            run.saved[step.save_as] = _extract(step, output)
    if oracle.answer is not None:
        run.answer = substitute(oracle.answer, run.saved)
    return run


MIS_AUTHORED_ANSWER = "-987654.321"
"""What a mis-authored oracle answers (``with_wrong_oracle``): a number no task of the generator expects."""


def with_wrong_oracle(tasks: list[TaskSpec]) -> tuple[list[TaskSpec], str]:
    """``tasks`` with the first one whose oracle states an answer answering ``MIS_AUTHORED_ANSWER`` instead, and that
    task's id: the gate matrix's "task whose oracle is wrong" (``Defect.WRONG_ORACLE``). The task's tool calls are
    unchanged, so only its answer is wrong, as when an author's expected value and script disagree."""
    for index, task in enumerate(tasks):
        if task.oracle is not None and task.oracle.answer is not None:
            wrong = task.model_copy(update={"oracle": task.oracle.model_copy(update={"answer": MIS_AUTHORED_ANSWER})})
            return [*tasks[:index], wrong, *tasks[index + 1 :]], task.task_id
    raise OracleError("no task with an oracle answer to mis-author")


def require_oracle(task: TaskSpec) -> Oracle:
    if task.oracle is None:
        raise OracleError(f"task {task.task_id} has no oracle")
    return task.oracle
