"""Oracle check: run every task's oracle on a private copy of its world and grade the result.

A task whose oracle does not reach reward 1 is not a valid task (step 1 of the recipe: de-risk the environment).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from envs.apps import World, call_tool
from envs.graders import grade
from envs.oracle import require_oracle, run_oracle
from envs.types import TaskSpec


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


def fork_world(pristine: Path, dest: Path) -> Path:
    """A private, writable copy of a pristine world for one rollout."""
    shutil.copytree(pristine, dest, symlinks=True)
    return dest


def check_task(task: TaskSpec, worlds_root: Path) -> OracleCheck:
    started = time.perf_counter()
    pristine = worlds_root / task.world_id
    error: str | None = None
    score, passed = 0.0, False
    with tempfile.TemporaryDirectory(prefix=f"oracle-{task.task_id}-") as scratch:
        try:
            world = World(fork_world(pristine, Path(scratch) / task.world_id))
            run = run_oracle(require_oracle(task), lambda name, args: call_tool(world, name, args))
            result = grade(task, run.answer, pristine, world.root)
            score, passed = result.score, result.passed
            if not passed:
                error = "; ".join(c.detail for c in result.criteria if not c.passed)
        except Exception as exc:  # one broken task must not hide the others: record it and go on
            error = f"{type(exc).__name__}: {exc}"
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


def check_oracles(
    tasks: Iterable[TaskSpec], worlds_root: Path, on_result: Callable[[OracleCheck], None] | None = None
) -> list[OracleCheck]:
    results = []
    for task in tasks:
        result = check_task(task, worlds_root)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results
