"""Group rollouts for the loops: ``Rollouts`` runs a task's group with that group's own sampling seed, either at a
position of the task stream or off it (evaluation, screening), and re-runs the rollouts an infra fault ended;
``trainable`` and ``has_signal`` decide which rollouts and groups a step may learn from; ``outcome`` is a step's mean
reward and share of passed rollouts."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envs.faults import FaultPlan
from envs.harness.agent import AgentSetup, EnvsForTask, run_group
from envs.rollout import local_envs
from envs.types import NO_POLICY_OUTCOME, ErrorClass, TaskSpec, Trajectory
from trainer.algorithms import AlgorithmConfig
from trainer.local import EmptyBatchError, TrainBatch
from trainer.loops.stream import group_seed, task_at


def default_envs(worlds_root: Path, apps: Sequence[str] | None) -> EnvsForTask:
    """``local_envs`` over ``apps`` on world copies under ``worlds_root``: what a loop runs against unless told."""
    return lambda task: local_envs(task, worlds_root, apps)


def trainable(trajectories: Sequence[Trajectory]) -> list[Trajectory]:
    """Drop rollouts that are no outcome of the policy (infra failures, broken tasks): they are re-run, not learned."""
    return [t for t in trajectories if t.error_class not in NO_POLICY_OUTCOME]


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
    """What every group rollout of a run needs: the environments per task, the agent (engine, tokenizer, harness;
    each group replaces the harness seed with its own, ``group_seed``), the run's seed, how often a rollout an infra
    fault ended is re-run, and the fault plan those re-runs are logged to (``envs.faults``; None: not logged)."""

    envs_for: EnvsForTask
    agent: AgentSetup
    seed: int
    infra_retries: int = 1
    faults: FaultPlan | None = None

    async def run(self, task: TaskSpec, position: int, n: int) -> list[Trajectory]:
        """``n`` rollouts of ``task`` as the group at stream ``position``, every one of them, in sample order.

        A rollout an infra fault ended (``retryable_infra``) is re-run, at most ``infra_retries`` times, so the group
        does not silently shrink. That is sound for GRPO: the fault is no outcome of the policy, so the re-run is one
        more independent sample of the same task from the same policy (its own seed, none of the group's), and
        dropping it instead would bias the group toward rollouts the faults spared (short ones, fewer tool calls).
        A rollout that still fails, or a broken task's, carries its ``error_class``: callers record it, train
        without it.
        """
        agent = self.agent.with_config(seed=group_seed(self.seed, position))
        envs, group_id = self.envs_for(task), f"p{position}-{task.task_id}"
        group = await run_group(task, envs, agent, group_id=group_id, n=n)

        async def rerun(index: int, attempt: int) -> Trajectory:
            if self.faults is not None:
                self.faults.note_retry("rollout", "rollouts")
            fresh = agent.with_config(seed=group_seed(agent.config.seed or 0, attempt * n + index))
            (again,) = await run_group(task, lambda _: envs(index), fresh, group_id=group_id, n=1)
            return again.model_copy(update={"sample_index": index})

        for attempt in range(1, self.infra_retries + 1):
            failed = [t.sample_index for t in group if t.error_class is ErrorClass.RETRYABLE_INFRA]
            if not failed:
                break
            for again in await asyncio.gather(*(rerun(index, attempt) for index in failed)):
                group[again.sample_index] = again
        return group

    async def group(self, task: TaskSpec, position: int, n: int) -> list[Trajectory]:
        """``n`` rollouts of ``task`` as the group at stream ``position``; trainable ones only."""
        return trainable(await self.run(task, position, n))

    def task_at(self, tasks: Sequence[TaskSpec], position: int) -> TaskSpec:
        """The task of stream ``position`` over ``tasks``."""
        return tasks[task_at(position, len(tasks), self.seed)]

    async def at(self, tasks: Sequence[TaskSpec], position: int, n: int) -> list[Trajectory]:
        """The group at stream ``position`` over ``tasks`` (``task_at`` picks its task): every rollout, infra failures
        included — a loop records them all and trains on the ``trainable`` ones."""
        return await self.run(self.task_at(tasks, position), position, n)

    async def sample(self, tasks: Sequence[TaskSpec], n: int) -> list[list[Trajectory]]:
        """``n`` rollouts of every task (trainable ones), seeds fixed by (seed, task index); off the stream."""
        return await asyncio.gather(*(self.group(task, -1 - index, n) for index, task in enumerate(tasks)))
