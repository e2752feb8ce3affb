"""The local profile's training run, end to end: base model → overfit subset → loop → before/after eval.

The base is a bootstrapped policy folder (``trainer.bootstrap``); its ``harness.json`` fixes the apps and harness
settings, so rollouts look exactly like the traces it imitated. The subset is the recipe's overfit rule: train tasks
on which the base's rollouts disagree (non-zero reward variance). Used by ``recipe train run`` and by
``benchmarks/learning_curve.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.build import load_tasks
from envs.harness.policy import PolicyHarness, read_policy_harness
from envs.types import Split, TaskSpec
from trainer.algorithms import AlgorithmConfig
from trainer.bootstrap import REPORT_FILE, BootstrapReport, BootstrapSpec, policy_harness, select_tasks
from trainer.engine import Engine
from trainer.local import TrainerConfig
from trainer.loops.common import LoopConfig, TaskFilter, default_envs, evaluate_reward, tasks_with_variance
from trainer.loops.engine_adapter import InProcessEngine
from trainer.model import load_policy


def base_loop_settings(base_dir: Path, **overrides: Any) -> dict[str, Any]:
    """LoopConfig fields that must match the base (harness, apps), plus the recipe's algorithm, plus ``overrides``."""
    settings = base_harness(base_dir)
    lr = overrides.pop("lr", 1e-4)
    return {
        "harness": settings.harness,
        "apps": settings.apps,
        "trainer": TrainerConfig(lr=lr, algorithm=AlgorithmConfig()),
        "checkpoint_every": 0,
    } | overrides


def base_harness(base_dir: Path) -> PolicyHarness:
    """The base's ``harness.json``; for a folder from before policies carried one, the settings its
    ``bootstrap.json`` spec implies."""
    return read_policy_harness(base_dir) or policy_harness(_bootstrap_spec(base_dir))


def _bootstrap_spec(base_dir: Path) -> BootstrapSpec:
    return BootstrapReport.model_validate_json((base_dir / REPORT_FILE).read_text()).spec


def train_candidates(base_dir: Path, data: Path) -> list[TaskSpec]:
    """The train-split tasks of the tiers the base was bootstrapped on."""
    spec = _bootstrap_spec(base_dir)
    return [task for task in select_tasks(load_tasks(data), spec) if task.split is Split.TRAIN]


def evaluate_policy_dir(
    policy_dir: Path, config: LoopConfig, worlds_root: Path, tasks: Sequence[TaskSpec]
) -> tuple[float, float]:
    """(mean reward, pass rate) of a saved policy on ``tasks``, ``config.eval_samples`` sampled rollouts each."""
    model, tokenizer = load_policy(policy_dir)
    with Engine(model, tokenizer, config.engine_config()) as engine:
        return asyncio.run(
            evaluate_reward(
                tasks,
                default_envs(worlds_root, config.apps),
                InProcessEngine(engine),
                tokenizer,
                config.harness,
                n=config.eval_samples,
                seed=config.seed + 1,
            )
        )


def overfit_subset(
    policy_dir: Path, config: LoopConfig, worlds_root: Path, tasks: Sequence[TaskSpec], size: int, n: int
) -> list[TaskSpec]:
    """The first ``size`` of ``tasks`` on which the policy's ``n`` rollouts disagree (``tasks_with_variance``)."""
    model, tokenizer = load_policy(policy_dir)
    envs_for = default_envs(worlds_root, config.apps)
    with Engine(model, tokenizer, config.engine_config()) as engine:
        varied = asyncio.run(
            tasks_with_variance(
                tasks, envs_for, InProcessEngine(engine), tokenizer, config.harness, n=n, seed=config.seed + 2
            )
        )
    return varied[:size]


def subset_filter(tasks: Sequence[TaskSpec]) -> TaskFilter:
    return TaskFilter(tier=None, split=None, ids=tuple(task.task_id for task in tasks))
