"""The trainer side of the fully-async loop, behind one small interface whichever runtime hosts it: a ``LocalTrainer``
on the policy (resumed from the run's newest loadable checkpoint), its steps, the weights it hands the engine, and
its checkpoints. ``in_process`` calls it directly, ``subprocess_runtime`` serves it from a child process and
``ray_runtime`` makes it a Ray actor."""

from __future__ import annotations

from pathlib import Path

from pydantic import JsonValue
from torch import Tensor

from envs.types import Trajectory
from trainer.local import CheckpointInfo, StepMetrics, TrainBatch
from trainer.loops.async_loop import AsyncLoopConfig
from trainer.loops.policy import open_trainer


class TrainerService:
    """``train`` one optimizer step on trajectories, ``state_dict_for_engine`` a copy of the weights for a push,
    ``checkpoint`` the run under ``<out_dir>/checkpoints`` (tagged ``async``)."""

    def __init__(self, policy_dir: Path, out_dir: Path, config: AsyncLoopConfig) -> None:
        self.trainer, self.tokenizer, self.resumed = open_trainer(policy_dir, config.trainer, out_dir)
        self.config, self.checkpoints = config, config.checkpoints(out_dir, "async")

    def resumed_at(self) -> CheckpointInfo | None:
        return self.resumed

    def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        return self.trainer.train_step(TrainBatch.from_trajectories(trajectories, self.config.trainer.algorithm))

    def state_dict_for_engine(self) -> dict[str, Tensor]:
        return self.trainer.state_dict_for_engine()

    def checkpoint(self, step: int, cursor: dict[str, JsonValue]) -> None:
        self.checkpoints.save(self.trainer, self.tokenizer, step, cursor)
