"""Measurements off the task stream: a policy's mean reward and pass@1 on a task set (``evaluate_reward``), and the
tasks whose rollouts disagree (``tasks_with_variance``, the recipe's overfit-subset rule)."""

from __future__ import annotations

from collections.abc import Sequence

from envs.types import TaskSpec
from evals.stats import mean_pass_at_k
from trainer.loops.rollouts import Rollouts


async def evaluate_reward(rollouts: Rollouts, tasks: Sequence[TaskSpec], n: int) -> tuple[float, float]:
    """(mean reward, pass@1) over ``n`` sampled rollouts of each task (``Rollouts.sample``): the reward averaged over
    the rollouts, pass@1 over the tasks (``evals.stats.mean_pass_at_k``); a task whose every rollout failed for infra
    or task reasons counts in neither."""
    groups = [group for group in await rollouts.sample(tasks, n) if group]
    if not groups:
        raise RuntimeError("every evaluation rollout failed for infra or task reasons")
    rewards = [t.reward for group in groups for t in group]
    return sum(rewards) / len(rewards), mean_pass_at_k([[t.passed for t in group] for group in groups])


async def tasks_with_variance(rollouts: Rollouts, tasks: Sequence[TaskSpec], n: int) -> list[TaskSpec]:
    """Tasks whose ``n`` rollouts' rewards spread (max > min): the ones a group can learn from — the recipe's rule
    for the overfit subset ("tasks with non-zero reward variance")."""
    groups = await rollouts.sample(tasks, n)
    return [t for t, g in zip(tasks, groups, strict=True) if g and max(r.reward for r in g) > min(r.reward for r in g)]
