"""What a stage starts from, read once from the run's config and the outputs the stages before it recorded.

``stage_inputs(config, stage, outputs, resolve)`` is a pure function of those: the base policy and the environment
builds de-risk recorded, the knobs the systems stage chose, the tasks whose base rollouts varied, and the defects the
profile aims at this stage. Everything a training stage derives from them — the harness a policy's rollouts use, the
task sets, the tuned trainer — is a method of the ``StageInputs`` it returns, with no I/O beyond reading the builds.
Where the work runs (engines, trainer jobs) is ``flows.stage_work``'s; the stage's record is ``flows.stage``'s.

    inputs = stage.inputs()                   # StageRun reads the manifests, this module does the rest
    train, heldout = inputs.task_sets(inputs.policy_settings())
    trainer = inputs.tuned_trainer({"policy_loss": "dppo_binary_tv"})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.errors import RecipeError
from envs.harness.policy import PolicyHarness
from envs.harness.tool_formats import ToolFormatName
from envs.types import TaskSpec
from flows.config import REWARD_DEFECTS, Defect, RecipeConfig, StageName
from tasks.artifacts import log
from tasks.environment import policy_harness, task_sets
from trainer.algorithms.config import AlgorithmConfig
from trainer.local import Layout, TrainerConfig


class StageOrderError(RecipeError, RuntimeError):
    """A stage was asked to run before the stages it builds on passed (or recorded what it needs)."""


def stage_defects(config: RecipeConfig, stage: StageName) -> list[Defect]:
    """The config's deliberate defects aimed at ``stage``: part of that stage's inputs only, so a run resumed with a
    defect re-runs its stage (and those after it) and reuses the healthy stages before it."""
    return [defect for defect in config.defects if defect.stage is stage]


@dataclass(frozen=True)
class StageInputs:
    config: RecipeConfig
    stage: StageName
    data: Path
    """The environment build the run trains and evaluates on."""
    base_data: Path
    """The generated environment the local base was taught on (``data`` unless the run brings its own)."""
    policy: str | None
    """The base policy (folder or hub id) de-risk prepared; None inside de-risk before it exists."""
    knobs: Mapping[str, Any]
    """The systems stage's chosen knobs (token budget, layout, engine sequences, workers); empty before it."""
    varied: frozenset[str] | None
    """The tasks whose base rollouts disagreed in de-risk; None before it measured them."""

    @property
    def worlds(self) -> Path:
        return self.data / "worlds"

    @property
    def defects(self) -> list[Defect]:
        return stage_defects(self.config, self.stage)

    def base_policy(self) -> str:
        if self.policy is None:
            raise StageOrderError(f"stage {self.stage.value}: de-risk recorded no base policy (run it again)")
        return self.policy

    def policy_settings(self, policy: str | None = None) -> PolicyHarness:
        """The harness every rollout of ``policy`` (default: the base) uses in this run (with this stage's
        ``wrong_tool_format`` defect: another dialect than the policy's)."""
        settings = policy_harness(policy or self.base_policy(), self.config.harness)
        if Defect.WRONG_TOOL_FORMAT not in self.defects:
            return settings
        written = settings.harness.tool_format
        wrong = next(name for name in ToolFormatName if name != written)
        log("defect %s: the harness reads %s, the policy writes %s", Defect.WRONG_TOOL_FORMAT.value, wrong, written)
        return settings.model_copy(update={"harness": settings.harness.model_copy(update={"tool_format": wrong})})

    def task_sets(self, settings: PolicyHarness) -> tuple[list[TaskSpec], list[TaskSpec]]:
        """(train, held-out) tasks of the run for a policy with these harness settings."""
        selection = self.config.tasks
        return task_sets(self.data, selection.tiers, settings.apps, selection.policy_apps_only, selection.limit)

    def tuned_trainer(self, algorithm: dict[str, Any] | None = None) -> TrainerConfig:
        """The profile's trainer with the systems stage's knobs (and ``algorithm`` changes, e.g. an ablation arm), and
        this stage's reward-path defect if the profile deliberately gives it one."""
        update: dict[str, Any] = {"token_budget": self.knobs["token_budget"], "layout": Layout(self.knobs["layout"])}
        changes = dict(algorithm or {})
        for defect in self.defects:
            if defect in REWARD_DEFECTS:
                log("defect %s: the trainer's algorithm.defect is %s", defect.value, REWARD_DEFECTS[defect].value)
                changes["defect"] = REWARD_DEFECTS[defect]
        if changes:
            update["algorithm"] = AlgorithmConfig(**self.config.trainer.algorithm.model_dump() | changes)
        return self.config.trainer.model_copy(update=update)

    def variance_tasks(self, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
        """Those of ``tasks`` whose base rollouts disagreed in the de-risk stage (all of them when none did)."""
        return [t for t in tasks if self.varied is not None and t.task_id in self.varied] or list(tasks)


def stage_inputs(
    config: RecipeConfig,
    stage: StageName,
    outputs: Mapping[StageName, Mapping[str, Any]],
    resolve: Callable[[str], Path],
) -> StageInputs:
    """``stage``'s inputs from the ``outputs`` its upstream stages recorded (de-risk's own, while it runs); ``resolve``
    turns a recorded path into one on this machine (``RunStore.path``)."""
    derisk = outputs.get(StageName.DERISK, {})
    data = derisk.get("data")
    if not isinstance(data, str):
        raise StageOrderError("stage derisk recorded no environment build (run it again: recipe stage derisk)")
    base_data = derisk.get("base_data")
    varied = derisk.get("variance_tasks")
    return StageInputs(
        config=config,
        stage=stage,
        data=resolve(data),
        base_data=resolve(base_data) if isinstance(base_data, str) else resolve(data),
        policy=str(derisk["policy"]) if derisk.get("policy") is not None else None,
        knobs=dict(outputs.get(StageName.SYSTEMS, {}).get("knobs") or {}),
        varied=frozenset(varied) if varied is not None else None,
    )
