"""Group rollouts for the loops: ``Rollouts`` runs a task's group with that group's own sampling seed, either at a
position of the task stream or off it (evaluation, screening); ``trainable`` and ``has_signal`` decide which rollouts
and groups a step may learn from; ``outcome`` is a step's mean reward and share of passed rollouts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase

from envs.harness.agent import EnvsForTask, HarnessConfig, run_group
from envs.harness.engine_client import CompletionEngine
from envs.rollout import local_envs
from envs.types import ErrorClass, TaskSpec, Trajectory
from trainer.algorithms import AlgorithmConfig
from trainer.local import EmptyBatchError, TrainBatch
from trainer.loops.stream import group_seed, task_at


def default_envs(worlds_root: Path, apps: Sequence[str] | None) -> EnvsForTask:
    """``local_envs`` over ``apps`` on world copies under ``worlds_root``: what a loop runs against unless told."""
    return lambda task: local_envs(task, worlds_root, apps)


def trainable(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Drop rollouts that are no outcome of the policy (infra failures, broken tasks): they are re-run, not learned."""
    return [t for t in trajectories if t.error_class not in (ErrorClass.RETRYABLE_INFRA, ErrorClass.TASK)]


def has_signal(group: Sequence[Trajectory], algorithm: AlgorithmConfig) -> bool:
    """Whether the zero-variance filter keeps this group: the very check ``TrainBatch`` makes (length shaping first)."""
    if not group:
        return False
    try:
        TrainBatch.from_trajectories(group, algorithm)
    except EmptyBatchError:
        return False
    return True


def generated_tokens(trajectories: Sequence[Trajectory]) -> int:
    return sum(sum(t.loss_mask) for t in trajectories)


def outcome(trajectories: Sequence[Trajectory]) -> tuple[float, float]:
    """(mean reward, share passed) of a non-empty set of rollouts, each rollout weighing the same."""
    n = len(trajectories)
    return sum(t.reward for t in trajectories) / n, sum(t.passed for t in trajectories) / n


@dataclass(frozen=True)
class Rollouts:
    """What every group rollout of a run needs: the environments per task, the engine, its tokenizer, the harness
    (whose seed each group replaces with its own, ``group_seed``) and the run's seed."""

    envs_for: EnvsForTask
    engine: CompletionEngine
    tokenizer: PreTrainedTokenizerBase
    harness: HarnessConfig
    seed: int

    async def group(self, task: TaskSpec, position: int, n: int) -> list[Trajectory]:
        """``n`` rollouts of ``task`` as the group at stream ``position``; trainable ones only."""
        config = self.harness.model_copy(update={"seed": group_seed(self.seed, position)})
        group_id = f"p{position}-{task.task_id}"
        group = await run_group(task, self.envs_for(task), self.engine, self.tokenizer, config, group_id=group_id, n=n)
        return trainable(group)

    async def at(self, tasks: Sequence[TaskSpec], position: int, n: int) -> list[Trajectory]:
        """The group at stream ``position`` over ``tasks`` (``task_at`` picks its task)."""
        return await self.group(tasks[task_at(position, len(tasks), self.seed)], position, n)

    async def sample(self, tasks: Sequence[TaskSpec], n: int) -> list[list[Trajectory]]:
        """``n`` rollouts of every task (trainable ones), seeds fixed by (seed, task index); off the stream."""
        return await asyncio.gather(*(self.group(task, -1 - index, n) for index, task in enumerate(tasks)))
