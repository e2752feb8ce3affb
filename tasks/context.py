"""The context objects stage tasks take, so that what travels together is passed as one thing.

* ``StageScope`` — where a task records what it does: the run's catalog under the stage's name, progress artifacts
  under the stage's folder, and the worlds its rollouts run in;
* ``RolloutJob`` — ``samples`` rollouts of each task by one policy with its harness against one engine, each task's
  group sampling with its own seed (``group_seed``), as the de-risk base rollouts and the TITO check do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envs.faults import FaultPlan
from envs.harness.agent import HarnessConfig
from envs.harness.policy import PolicyHarness
from envs.types import TaskSpec
from tasks.catalog import Catalog
from tasks.engine import EngineSettings
from trainer.loops.stream import group_seed


@dataclass(frozen=True)
class StageScope:
    catalog: Catalog
    stage: str
    """The stage's name: the ``stage`` column of its catalog rows."""
    folder: str
    """The stage's folder (``4-overfit``): the prefix of its artifact keys."""
    worlds: Path
    """The run's worlds folder (``<world_id>/`` per task)."""
    faults: FaultPlan | None = None
    """Faults to inject into the stage's rollouts (``envs.faults``; None: off), logged in the stage's folder."""


@dataclass(frozen=True)
class RolloutJob:
    policy_dir: Path
    tasks: Sequence[TaskSpec]
    settings: PolicyHarness
    engine: EngineSettings
    samples: int
    """Rollouts per task (one group)."""
    seed: int

    def harness(self, index: int) -> HarnessConfig:
        """The harness of the ``index``-th task's group: the policy's, sampling with that group's seed."""
        return self.settings.harness.model_copy(update={"seed": group_seed(self.seed, index)})

    def by_id(self) -> dict[str, TaskSpec]:
        return {t.task_id: t for t in self.tasks}
