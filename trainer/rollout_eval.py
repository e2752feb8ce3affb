"""Pass@1 of a policy from real rollouts: the harness (``run_group``) against our engine, one row per tier × split.

Each task runs ``n`` sampled rollouts (temperature 1.0, seeded) and one greedy rollout, on private world copies
(``envs.rollout.local_envs``). Per (tier, split):

* pass@1 = mean over tasks of (passed samples / n)  (RECIPE "Evaluation": unbiased pass@1 = c/n per task);
* greedy pass@1 = share of tasks the greedy rollout solves;
* right-tool rate = share of sampled rollouts whose first call names the oracle's first tool; right-call rate = same
  tool and the same arguments;
* copy accuracy = among sampled rollouts of one-step oracles that made exactly the oracle's call, the share solved
  (what is left once the call is right: copying the value into the answer).

``EngineCompletions`` puts an in-process ``trainer.engine.Engine`` behind the harness's ``CompletionEngine``
protocol (the same calls ``CompletionsClient`` makes over HTTP, minus the socket).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from envs.harness.agent import HarnessConfig, run_group
from envs.harness.engine_client import Completion
from envs.mcp.servers import mcp_name
from envs.oracle import require_oracle, substitute
from envs.rollout import local_envs
from envs.types import TaskSpec, Trajectory
from trainer.engine import Engine, SamplingParams


class EngineCompletions:
    """``CompletionEngine`` over an in-process ``Engine``: token ids in, sampled ids + logprobs out."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def complete(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop_token_ids: Sequence[int] = (),
    ) -> Completion:
        params = SamplingParams(
            temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_tokens, stop_token_ids=tuple(stop_token_ids)
        )
        done = await self.engine.generate(prompt_ids, params)
        return Completion(done.token_ids_T, done.logprobs_T, str(done.finish_reason), done.weight_version)


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
    per_task = [sum(bool(t.passed) for t in group) / len(group) for _, group in sampled]
    return PassRow(
        tier=tier,
        split=split,
        tasks=len(sampled),
        samples=len(flat),
        pass_at_1=sum(per_task) / len(per_task),
        greedy_pass_at_1=sum(bool(t.passed) for t in greedy) / len(greedy),
        right_tool_rate=right_tool / len(flat),
        right_call_rate=right_call / len(flat),
        copy_accuracy=copied / copy_tries if copy_tries else None,
    )


async def evaluate_pass_at_1(
    engine: Engine,
    tokenizer,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    apps: Sequence[str],
    config: HarnessConfig,
    n: int,
    concurrency: int = 32,
) -> list[PassRow]:
    """Sampled (``config.temperature``, ``n`` per task) and greedy rollouts of every task → one row per tier × split."""
    if not tasks:
        raise ValueError("no tasks to evaluate")
    client = EngineCompletions(engine)
    greedy_config = config.model_copy(update={"temperature": 0.0})
    gate = asyncio.Semaphore(concurrency)

    async def both(task: TaskSpec) -> tuple[list[Trajectory], Trajectory]:
        async with gate:
            envs = local_envs(task, worlds_root, apps)
            sampled = await run_group(task, envs, client, tokenizer, config, group_id=f"{task.task_id}-t", n=n)
            [greedy] = await run_group(task, envs, client, tokenizer, greedy_config, group_id=f"{task.task_id}-g", n=1)
            return sampled, greedy

    results = await asyncio.gather(*(both(task) for task in tasks))
    cells: dict[tuple[str, str], tuple[list, list]] = defaultdict(lambda: ([], []))
    for task, (sampled, greedy) in zip(tasks, results, strict=True):
        cell = cells[(str(task.tier), str(task.split))]
        cell[0].append((task, sampled))
        cell[1].append(greedy)
    return [_row(tier, split, *cells[(tier, split)]) for tier, split in sorted(cells)]
