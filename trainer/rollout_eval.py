"""Pass@1 of a policy from real rollouts: the harness (``run_group``) against our engine, one row per tier × split.

Each task runs ``n`` sampled rollouts (temperature 1.0, seeded) and one greedy rollout, on private world copies
(``envs.rollout.local_envs``). Per (tier, split):

* pass@1 = mean over tasks of (passed samples / n)  (``evals.stats.mean_pass_at_k``);
* greedy pass@1 = share of tasks the greedy rollout solves (the same, one sample per task);
* right-tool rate = share of sampled rollouts whose first call names the oracle's first tool; right-call rate = same
  tool and the same arguments;
* copy accuracy = among sampled rollouts of one-step oracles that made exactly the oracle's call, the share solved
  (what is left once the call is right: copying the value into the answer).

The rollouts go through the in-process engine (``trainer.engine.completions.EngineCompletions``), no HTTP.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from envs.harness.agent import AgentSetup, HarnessConfig, run_group
from envs.mcp.servers import mcp_name
from envs.oracle import require_oracle, substitute
from envs.rollout import local_envs
from envs.types import TaskSpec, Trajectory
from evals.stats import mean_pass_at_k
from trainer.engine import Engine
from trainer.engine.completions import EngineCompletions


class PassRow(BaseModel):
    tier: str
    split: str
    tasks: int
    samples: int
    pass_at_1: float
    greedy_pass_at_1: float
    right_tool_rate: float
    right_call_rate: float
    copy_accuracy: float | None  # None when no sampled rollout made the oracle's exact call


def _first_call(task: TaskSpec) -> tuple[str, dict]:
    step = require_oracle(task).steps[0]
    return mcp_name(step.tool), substitute(step.args, {})


def _row(tier: str, split: str, sampled: list[tuple[TaskSpec, list[Trajectory]]], greedy: list[Trajectory]) -> PassRow:
    flat = [(task, t) for task, group in sampled for t in group]
    right_tool = right_call = copied = copy_tries = 0
    for task, trajectory in flat:
        tool, args = _first_call(task)
        first = trajectory.tool_calls[0] if trajectory.tool_calls else None
        right_tool += first is not None and first.tool == tool
        exact = first is not None and first.tool == tool and first.args == args
        right_call += exact
        if exact and len(require_oracle(task).steps) == 1:
            copy_tries += 1
            copied += bool(trajectory.passed)
    return PassRow(
        tier=tier,
        split=split,
        tasks=len(sampled),
        samples=len(flat),
        pass_at_1=mean_pass_at_k([[bool(t.passed) for t in group] for _, group in sampled]),
        greedy_pass_at_1=mean_pass_at_k([[bool(t.passed)] for t in greedy]),
        right_tool_rate=right_tool / len(flat),
        right_call_rate=right_call / len(flat),
        copy_accuracy=copied / copy_tries if copy_tries else None,
    )


@dataclass(frozen=True)
class PassEval:
    """How each task is rolled out: on copies of its world under ``worlds_root`` with ``apps``, through ``harness``."""

    worlds_root: Path
    apps: Sequence[str]
    harness: HarnessConfig
    n: int
    """Sampled rollouts per task (at ``harness.temperature``); one greedy rollout comes on top."""
    concurrency: int = 32
    """Tasks rolled out at once."""


async def evaluate_pass_at_1(engine: Engine, tokenizer, tasks: Sequence[TaskSpec], setup: PassEval) -> list[PassRow]:
    """Sampled (``setup.n`` per task) and greedy rollouts of every task → one row per tier × split."""
    if not tasks:
        raise ValueError("no tasks to evaluate")
    agent = AgentSetup(EngineCompletions(engine), tokenizer, setup.harness)
    greedy_agent = agent.with_config(temperature=0.0)
    gate = asyncio.Semaphore(setup.concurrency)

    async def both(task: TaskSpec) -> tuple[list[Trajectory], Trajectory]:
        async with gate:
            envs = local_envs(task, setup.worlds_root, setup.apps)
            sampled = await run_group(task, envs, agent, group_id=f"{task.task_id}-t", n=setup.n)
            [greedy] = await run_group(task, envs, greedy_agent, group_id=f"{task.task_id}-g", n=1)
            return sampled, greedy

    results = await asyncio.gather(*(both(task) for task in tasks))
    cells: dict[tuple[str, str], tuple[list, list]] = defaultdict(lambda: ([], []))
    for task, (sampled, greedy) in zip(tasks, results, strict=True):
        cell = cells[(str(task.tier), str(task.split))]
        cell[0].append((task, sampled))
        cell[1].append(greedy)
    return [_row(tier, split, *cells[(tier, split)]) for tier, split in sorted(cells)]
