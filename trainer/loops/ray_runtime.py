"""The fully-async loop on Ray: the engine (with the harness and tool sessions) and the trainer as two actors.

The driver keeps the loop's rules (``async_loop.run_async``: admission, buffer, staleness, checkpoints); the
``RayRuntime`` forwards each operation to an actor and awaits its ``ObjectRef``:

* ``RolloutActor`` (async actor: many groups generate concurrently on its event loop) owns the ``Engine`` and runs
  ``Rollouts.at``; it also serves pause / update_weights / resume, so a push is the same ``push_weights`` as in
  process — the new weights travel as one object-store reference from the trainer actor to the rollout actor.
* the trainer actor is a ``TrainerService`` (``trainer_service``): it owns the ``LocalTrainer`` and writes the
  checkpoints.

Locally ``ray.init(num_cpus=2)``, with Ray's token authentication on and a new token of its own (Ray listens on
every interface, and without a token anyone who reaches a port can run code in it); ``AsyncLoopConfig.ray_address``
joins a cluster instead, with that cluster's token from Ray's own places. Actors ask for no CPUs: the two share the
machine with the driver as threads would.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import ray
from pydantic import JsonValue
from torch import Tensor

from envs.harness.agent import EnvsForTask
from envs.tokens import new_token
from envs.types import TaskSpec, Trajectory
from trainer.engine.weight_sync import push_weights
from trainer.local import StepMetrics
from trainer.loops.async_loop import AsyncLoopConfig, AsyncStart, run_async
from trainer.loops.evaluation import evaluate_reward
from trainer.loops.history import LoopHistory
from trainer.loops.job import LoopJob
from trainer.loops.policy import engine_weights, open_engine
from trainer.loops.trainer_service import TrainerService


class RolloutActor:
    """Engine + harness + local tool sessions; ``generate(position)`` returns one group's rollouts (infra failures
    included: the driver records them and trains on the rest)."""

    def __init__(self, weights: Path, tasks: list[TaskSpec], envs_for: EnvsForTask, config: AsyncLoopConfig) -> None:
        engine = open_engine(weights, config.engine_config(), config.engine_weight_noise)
        self.client = config.engine_client(engine)
        self.rollouts = config.rollouts(envs_for, self.client, engine.tokenizer)
        self.tasks, self.config = tasks, config

    async def generate(self, position: int) -> list[Trajectory]:
        return await self.rollouts.at(self.tasks, position, self.config.samples_per_prompt)

    async def evaluate(self) -> tuple[float, float]:
        return await evaluate_reward(self.rollouts, self.tasks[: self.config.eval_tasks], self.config.eval_samples)

    async def pause(self) -> None:
        await self.client.pause()

    async def update_weights(self, state: dict[str, Tensor]) -> int:
        return await asyncio.to_thread(self.client.engine.update_weights, state)

    async def resume(self) -> None:
        await self.client.resume()

    def close(self) -> None:
        self.client.engine.close()


class _ActorSync:
    """``WeightSync`` over the rollout actor; the source hands over an object-store reference, not tensors."""

    def __init__(self, rollout) -> None:
        self.rollout = rollout

    async def pause(self) -> None:
        await self.rollout.pause.remote()

    async def update_weights(self, source) -> int:
        return await self.rollout.update_weights.remote(source.state_dict_for_engine())

    async def resume(self) -> None:
        await self.rollout.resume.remote()


class _TrainerWeights:
    def __init__(self, trainer) -> None:
        self.trainer = trainer

    def state_dict_for_engine(self):  # an ObjectRef: Ray resolves it inside the rollout actor
        return self.trainer.state_dict_for_engine.remote()


class RayRuntime:
    """``async_loop.Runtime`` over the two actors."""

    def __init__(self, rollout, trainer, version_offset: int) -> None:
        self.rollout, self.trainer, self.version_offset = rollout, trainer, version_offset

    async def generate(self, position: int) -> list[Trajectory]:
        return await self.rollout.generate.remote(position)

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        return await self.trainer.train.remote(trajectories)

    async def push(self) -> int:
        return await push_weights(_ActorSync(self.rollout), _TrainerWeights(self.trainer))

    async def evaluate(self) -> tuple[float, float]:
        return await self.rollout.evaluate.remote()

    async def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        await self.trainer.checkpoint.remote(step, cursor)


def _token_auth_with_a_new_token() -> None:
    """Token authentication on for the Ray instance this process starts, with a token of its own (its workers
    inherit both through the environment). Ray reads its settings once per process: re-read them, as Ray's own
    ``ray.init`` does when it turns token authentication on."""
    from ray._raylet import AuthenticationTokenLoader, Config

    os.environ |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": new_token()}
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def run_on_ray(job: LoopJob, config: AsyncLoopConfig) -> LoopHistory:
    """The fully-async loop with the engine and the trainer as Ray actors (see the module docstring); the job's
    environment factory travels to the rollout actor by pickle, its hooks stay with the driver."""
    if config.engines is not None:
        raise ValueError(
            "runtime 'ray' hosts its own engine in the rollout actor; with engine servers (loop.engines) use the "
            "asyncio or subprocess runtime"
        )
    started_ray = not ray.is_initialized()
    if started_ray:
        if config.ray_address:
            ray.init(address=config.ray_address)
        else:
            _token_auth_with_a_new_token()
            ray.init(num_cpus=2, include_dashboard=False)
    try:
        job = job.resolved()
        trainer = ray.remote(num_cpus=0)(TrainerService).remote(job.policy_dir, job.out_dir, config)
        concurrency = config.workers + 8  # every worker's group plus the control calls of a push
        resumed = ray.get(trainer.resumed_at.remote())
        rollout_cls = ray.remote(num_cpus=0, max_concurrency=concurrency)(RolloutActor)
        weights, selected = engine_weights(job.policy_dir, resumed), config.tasks.select(job.tasks)
        rollout = rollout_cls.remote(weights, selected, job.envs(config.apps), config)
        start = AsyncStart.resume(resumed, job.out_dir)
        try:
            runtime = RayRuntime(rollout, trainer, start.step)
            return asyncio.run(run_async(runtime, config, start, job.out_dir, job.hooks))
        finally:
            ray.get(rollout.close.remote())
    finally:
        if started_ray:
            ray.shutdown()
