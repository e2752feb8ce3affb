"""The fully-async loop's in-process ``Runtime``: the engine and the trainer in this process, generation on the
engine's thread and ``train_step`` in a worker thread (``run_in_process``); with ``AsyncLoopConfig.faults`` on, the
engine's completions go through the fault injector (``envs.faults``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import JsonValue

from envs.types import TaskSpec, Trajectory
from trainer.local import StepMetrics, TrainBatch
from trainer.loops.async_loop import AsyncLoopConfig, AsyncStart, run_async
from trainer.loops.engine_adapter import InProcessEngine, push_weights
from trainer.loops.evaluation import evaluate_reward
from trainer.loops.history import LoopHistory
from trainer.loops.job import LoopJob
from trainer.loops.policy import LoopCheckpoints, Policy, open_policy


class InProcessRuntime:
    """``async_loop.Runtime`` over an open ``Policy`` and the selected tasks."""

    def __init__(self, policy: Policy, job: LoopJob, tasks: Sequence[TaskSpec], config: AsyncLoopConfig) -> None:
        self.policy, self.tasks, self.config = policy, tasks, config
        faults = config.faults.injector("engine") if config.faults else None
        self.client = InProcessEngine(policy.engine, faults)
        self.rollouts = config.rollouts(job.envs(config.apps), self.client, policy.tokenizer)
        self.checkpoints: LoopCheckpoints = config.checkpoints(job.out_dir, "async")
        self.version_offset = policy.resumed.step if policy.resumed else 0

    async def generate(self, position: int) -> list[Trajectory]:
        """Every rollout of the group, infra failures included: the loop records them and trains on the rest."""
        task = self.rollouts.task_at(self.tasks, position)
        return await self.rollouts.run(task, position, self.config.samples_per_prompt)

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        batch = TrainBatch.from_trajectories(trajectories, self.config.trainer.algorithm)
        return await asyncio.to_thread(self.policy.trainer.train_step, batch)

    async def push(self) -> int:
        return await push_weights(self.client, self.policy.trainer)

    async def evaluate(self) -> tuple[float, float]:
        return await evaluate_reward(self.rollouts, self.tasks[: self.config.eval_tasks], self.config.eval_samples)

    async def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        trainer, tokenizer = self.policy.trainer, self.policy.tokenizer
        await asyncio.to_thread(self.checkpoints.save, trainer, tokenizer, step, cursor)


def run_in_process(job: LoopJob, config: AsyncLoopConfig) -> LoopHistory:
    """Run (or resume from ``job.out_dir``'s newest checkpoint) the fully-async loop in this process."""
    selected = config.tasks.select(job.tasks)
    policy = open_policy(job.policy_dir, config.trainer, job.out_dir, config.engine_config())
    try:
        runtime = InProcessRuntime(policy, job, selected, config)
        start = AsyncStart.resume(policy.resumed, job.out_dir)
        return asyncio.run(run_async(runtime, config, start, job.out_dir, job.hooks))
    finally:
        policy.close()
