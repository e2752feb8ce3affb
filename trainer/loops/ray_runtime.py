"""The fully-async loop on Ray: the engine (with the harness and tool sessions) and the trainer as two actors.

The driver keeps the loop's rules (``async_loop.run_async``: admission, buffer, staleness, checkpoints); the
``RayRuntime`` forwards each operation to an actor and awaits its ``ObjectRef``:

* ``RolloutActor`` (async actor: many groups generate concurrently on its event loop) owns the ``Engine`` and runs
  ``rollout_group``; it also serves pause / update_weights / resume, so a push is the same ``push_weights`` as in
  process — the new weights travel as one object-store reference from the trainer actor to the rollout actor.
* ``TrainerActor`` owns the ``LocalTrainer`` and writes the checkpoints.

Locally ``ray.init(num_cpus=2)`` (``RAY_AUTH_MODE=disabled`` is set when unset); ``AsyncLoopConfig.ray_address``
joins a cluster instead. Actors ask for no CPUs: the two share the machine with the driver as threads would.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

import ray
from pydantic import JsonValue
from torch import Tensor

from envs.types import TaskSpec, Trajectory
from trainer.local import CheckpointInfo, StepMetrics, TrainBatch, save_checkpoint
from trainer.loops.common import (
    CHECKPOINTS,
    EnvsFor,
    LoopHistory,
    OnRollouts,
    OnStep,
    default_envs,
    engine_weights,
    evaluate_reward,
    open_engine,
    open_trainer,
    rollout_group,
    task_at,
)
from trainer.loops.engine_adapter import InProcessEngine, push_weights


class RolloutActor:
    """Engine + harness + local tool sessions; ``generate(position)`` returns one group's trainable rollouts."""

    def __init__(
        self, weights: Path, tasks: list[TaskSpec], worlds_root: Path, config, envs_for: EnvsFor | None
    ) -> None:
        engine = open_engine(weights, config.engine_config())
        self.client = InProcessEngine(engine)
        self.tokenizer, self.tasks, self.config = engine.tokenizer, tasks, config
        self.envs_for = envs_for or default_envs(worlds_root, config.apps)

    async def generate(self, position: int) -> list[Trajectory]:
        task = self.tasks[task_at(position, len(self.tasks), self.config.seed)]
        harness, n = self.config.harness, self.config.samples_per_prompt
        return await rollout_group(
            task, position, self.envs_for, self.client, self.tokenizer, harness, seed=self.config.seed, n=n
        )

    async def evaluate(self) -> tuple[float, float]:
        config = self.config
        tasks = self.tasks[: config.eval_tasks]
        harness, n = config.harness, config.eval_samples
        return await evaluate_reward(tasks, self.envs_for, self.client, self.tokenizer, harness, n=n, seed=config.seed)

    async def pause(self) -> None:
        await self.client.pause()

    async def update_weights(self, state: dict[str, Tensor]) -> int:
        return await asyncio.to_thread(self.client.engine.update_weights, state)

    async def resume(self) -> None:
        await self.client.resume()

    def close(self) -> None:
        self.client.engine.close()


class TrainerActor:
    def __init__(self, policy_dir: Path, out_dir: Path, config) -> None:
        self.trainer, self.tokenizer, resumed = open_trainer(policy_dir, config.trainer, out_dir)
        self.config, self.out_dir = config, out_dir
        self.resumed = resumed

    def resumed_at(self) -> CheckpointInfo | None:
        return self.resumed

    def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        return self.trainer.train_step(TrainBatch.from_trajectories(trajectories, self.config.trainer.algorithm))

    def state_dict_for_engine(self) -> dict[str, Tensor]:
        return self.trainer.state_dict_for_engine()

    def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        root = self.out_dir / CHECKPOINTS
        harness = self.config.policy_harness()
        save_checkpoint(root, self.trainer, step, cursor, {"kind": "async"}, tokenizer=self.tokenizer, harness=harness)


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


def run_on_ray(
    policy_dir: Path,
    tasks: Sequence[TaskSpec],
    worlds_root: Path,
    config,
    out_dir: Path,
    on_step: OnStep | None = None,
    envs_for: EnvsFor | None = None,
    on_rollouts: OnRollouts | None = None,
) -> LoopHistory:
    """``run_async_loop`` with the engine and the trainer as Ray actors (see the module docstring); ``envs_for``
    travels to the rollout actor by pickle."""
    from trainer.loops.async_loop import StreamCursor, run_async

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started_ray = not ray.is_initialized()
    if started_ray:
        if config.ray_address:
            ray.init(address=config.ray_address)
        else:
            ray.init(num_cpus=2, include_dashboard=False)
    try:
        policy_dir, out_dir, worlds_root = policy_dir.resolve(), out_dir.resolve(), worlds_root.resolve()
        trainer = ray.remote(num_cpus=0)(TrainerActor).remote(policy_dir, out_dir, config)
        concurrency = config.workers + 8  # every worker's group plus the control calls of a push
        resumed = ray.get(trainer.resumed_at.remote())
        rollout_cls = ray.remote(num_cpus=0, max_concurrency=concurrency)(RolloutActor)
        rollout = rollout_cls.remote(engine_weights(policy_dir, resumed), list(tasks), worlds_root, config, envs_for)
        start = resumed.step if resumed else 0
        cursor = StreamCursor.from_json(resumed.data_cursor) if resumed else StreamCursor()
        history = LoopHistory.resume(out_dir, "async", start)
        try:
            return asyncio.run(
                run_async(
                    RayRuntime(rollout, trainer, start), config, start, cursor, history, out_dir, on_step, on_rollouts
                )
            )
        finally:
            ray.get(rollout.close.remote())
    finally:
        if started_ray:
            ray.shutdown()
