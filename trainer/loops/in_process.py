"""The fully-async loop's ``Runtime`` with the harness and the tool sessions in this process, generating with the
loop's engine (``trainer.loops.generation``: an engine on its own thread here, or engine servers over HTTP), the
trainer behind a ``TrainerHandle`` — a ``TrainerService`` here (``run_in_process``, its blocking calls in a worker
thread) or one in a child process (``subprocess_runtime``). With ``AsyncLoopConfig.faults`` on, the engine's
completions go through the fault injector (``envs.faults``)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from pydantic import JsonValue
from torch import Tensor

from envs.types import TaskSpec, Trajectory
from trainer.engine.weight_sync import push_weights
from trainer.local import CheckpointInfo, StepMetrics
from trainer.loops.async_loop import AsyncLoopConfig, AsyncStart, run_async
from trainer.loops.evaluation import evaluate_reward
from trainer.loops.generation import Generation, open_generation
from trainer.loops.history import LoopHistory
from trainer.loops.job import LoopJob
from trainer.loops.policy import engine_weights
from trainer.loops.trainer_service import TrainerService


class TrainerHandle(Protocol):
    """What the loop needs of its trainer (blocking calls)."""

    def train(self, trajectories: list[Trajectory]) -> StepMetrics: ...

    def state_dict_for_engine(self) -> dict[str, Tensor]: ...

    def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None: ...


class InProcessRuntime:
    """``async_loop.Runtime`` over the loop's generation (``trainer.loops.generation``), the selected tasks and a
    ``TrainerHandle``."""

    def __init__(
        self,
        generation: Generation,
        trainer: TrainerHandle,
        job: LoopJob,
        tasks: Sequence[TaskSpec],
        config: AsyncLoopConfig,
        version_offset: int = 0,
    ) -> None:
        self.trainer, self.tasks, self.config, self.version_offset = trainer, tasks, config, version_offset
        self.client = generation.client
        self.rollouts = config.rollouts(job.envs(config.apps), self.client, generation.tokenizer)

    async def generate(self, position: int) -> list[Trajectory]:
        """Every rollout of the group, infra failures included: the loop records them and trains on the rest."""
        return await self.rollouts.at(self.tasks, position, self.config.samples_per_prompt)

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        return await asyncio.to_thread(self.trainer.train, trajectories)

    async def push(self) -> int:
        return await push_weights(self.client, self.trainer)

    async def evaluate(self) -> tuple[float, float]:
        return await evaluate_reward(self.rollouts, self.tasks[: self.config.eval_tasks], self.config.eval_samples)

    async def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        await asyncio.to_thread(self.trainer.checkpoint, step, cursor)


def run_with_trainer(
    job: LoopJob, config: AsyncLoopConfig, trainer: TrainerHandle, resumed: CheckpointInfo | None
) -> LoopHistory:
    """The loop over the generation opened here on the weights ``trainer`` resumed from (``resumed``: its
    checkpoint)."""

    async def run() -> LoopHistory:
        async with open_generation(engine_weights(job.policy_dir, resumed), config) as generation:
            offset = resumed.step if resumed else 0
            runtime = InProcessRuntime(generation, trainer, job, config.tasks.select(job.tasks), config, offset)
            start = AsyncStart.resume(resumed, job.out_dir)
            return await run_async(runtime, config, start, job.out_dir, job.hooks)

    return asyncio.run(run())


def run_in_process(job: LoopJob, config: AsyncLoopConfig) -> LoopHistory:
    """Run (or resume from ``job.out_dir``'s newest checkpoint) the fully-async loop, the trainer in this process."""
    service = TrainerService(job.policy_dir, job.out_dir, config)
    return run_with_trainer(job, config, service, service.resumed)
