"""``LoopJob``: what one loop run works on and reports to — the base policy, the tasks, the worlds, the run folder,
the environment override and the ``LoopHooks`` — passed whole to ``run_sync_loop`` / ``run_async_loop``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from envs.harness.agent import EnvsForTask
from envs.types import TaskSpec, Trajectory
from trainer.loops.history import StepRecord
from trainer.loops.rollouts import default_envs

OnStep = Callable[[StepRecord], None]
"""Called after each optimizer step with its record."""
OnRollouts = Callable[[int, list[Trajectory]], None]
"""Called after each optimizer step with the rollouts generated since the previous one (their step number first)."""


@dataclass(frozen=True)
class LoopHooks:
    """Callbacks of a running loop (each optional)."""

    on_step: OnStep | None = None
    on_rollouts: OnRollouts | None = None

    def step(self, record: StepRecord) -> None:
        if self.on_step is not None:
            self.on_step(record)

    def rollouts(self, step: int, trajectories: list[Trajectory]) -> None:
        if self.on_rollouts is not None:
            self.on_rollouts(step, trajectories)


@dataclass(frozen=True)
class LoopJob:
    """One loop run: train ``policy_dir`` on (the config's selection of) ``tasks`` with worlds under
    ``worlds_root``, writing to (and resuming from) ``out_dir``; ``envs_for`` overrides the environment factory per
    task (default: ``local_envs`` over the config's apps)."""

    policy_dir: Path
    tasks: Sequence[TaskSpec]
    worlds_root: Path
    out_dir: Path
    hooks: LoopHooks = field(default_factory=LoopHooks)
    envs_for: EnvsForTask | None = None

    def envs(self, apps: Sequence[str] | None) -> EnvsForTask:
        return self.envs_for or default_envs(self.worlds_root, apps)

    def resolved(self) -> LoopJob:
        """The job with absolute paths, for actors whose working folder may differ from the driver's."""
        return replace(
            self,
            policy_dir=self.policy_dir.resolve(),
            worlds_root=self.worlds_root.resolve(),
            out_dir=self.out_dir.resolve(),
        )
