"""The composed config of a pipeline run: one profile (``deployments/profiles/<name>.yaml``) validated by pydantic.

A profile names everything a run needs — where the environment and the policy come from, which backends run the
engine, trainer, sandboxes and runtime, the training and rollout knobs, and for every stage its parameters and the
thresholds of its gate. ``load_profile`` validates the whole file before anything runs; a bad key or value fails
with the field's dotted path and the reason (``ProfileError``). ``--set stages.overfit.steps=30`` style overrides go
through the same validation (``apply_overrides``).

Thresholds live in ``flows.config.stages`` and nowhere else: a stage reads its own section
(``config.stages.<stage>``) and its gate compares what it measured against ``thresholds``. They are never loosened
to make a stage pass.

    config = load_profile("local")                                    # deployments/profiles/local.yaml
    config = load_profile(Path("my.yaml"), ["stages.overfit.steps=30"])
    config.stages.overfit.thresholds.min_reward_gain                  # 0.1

The profile is composed of parts, each short: ``base`` (its error, stage names, limits), ``sections`` (where things
come from, backends, engine, cluster, …), ``stages`` (each stage's parameters and gate thresholds), ``defects`` (the
gate matrix's deliberate defects) and ``profile`` (``RecipeConfig``, validated once at the boundary, and loading a
profile with its ``extends`` and ``--set`` overrides). Import from here.
"""

from flows.config.base import (
    MAX_BAR,
    MAX_GIB,
    MAX_PARALLEL,
    MAX_SEED,
    MAX_STEPS,
    MAX_TIMEOUT_S,
    MAX_TOKENS,
    MAX_WORLDS_PER_DOMAIN,
    PROFILE_NAME,
    PROFILES_DIR,
    ProfileError,
    Resources,
    RewardBar,
    Seconds,
    Seed,
    StageName,
    valid_harness_changes,
)
from flows.config.defects import (
    DEFECT_STAGES,
    REWARD_DEFECTS,
    Defect,
)
from flows.config.profile import (
    MAX_EXTENDS,
    MAX_PROFILE_DEPTH,
    MAX_PROFILE_NODES,
    RecipeConfig,
    RunChanges,
    apply_overrides,
    load_profile,
    profile_path,
    resolve_profile,
    section_digest,
    validate_config,
)
from flows.config.sections import (
    AlertsSection,
    Backends,
    ClusterIsolation,
    ClusterSection,
    EngineSection,
    EnvironmentSection,
    JudgeSection,
    LocalClusterSection,
    LocalNodeSection,
    PolicySection,
    RolloutSection,
    SandboxSection,
    ScheduleSection,
    TaskSelection,
    VllmSection,
)
from flows.config.stages import (
    AblationArm,
    AblationsStage,
    AblationsThresholds,
    DeriskStage,
    DeriskThresholds,
    HeroRetention,
    HeroStage,
    HeroThresholds,
    OverfitStage,
    OverfitThresholds,
    StagesSection,
    SweepSpace,
    SystemsStage,
    SystemsThresholds,
    TitoStage,
    TitoThresholds,
    TransferStage,
    TransferThresholds,
    recipe_arms,
)
from trainer.backends import EngineBackend, TrainerBackend  # the profile's backend axes, defined low
from trainer.specs import PolicySource

__all__ = [
    "DEFECT_STAGES",
    "MAX_BAR",
    "MAX_EXTENDS",
    "MAX_GIB",
    "MAX_PARALLEL",
    "MAX_PROFILE_DEPTH",
    "MAX_PROFILE_NODES",
    "MAX_SEED",
    "MAX_STEPS",
    "MAX_TIMEOUT_S",
    "MAX_TOKENS",
    "MAX_WORLDS_PER_DOMAIN",
    "PROFILES_DIR",
    "PROFILE_NAME",
    "REWARD_DEFECTS",
    "AblationArm",
    "AblationsStage",
    "AblationsThresholds",
    "AlertsSection",
    "Backends",
    "ClusterIsolation",
    "ClusterSection",
    "Defect",
    "DeriskStage",
    "DeriskThresholds",
    "EngineBackend",
    "EngineSection",
    "EnvironmentSection",
    "HeroRetention",
    "HeroStage",
    "HeroThresholds",
    "JudgeSection",
    "LocalClusterSection",
    "LocalNodeSection",
    "OverfitStage",
    "OverfitThresholds",
    "PolicySection",
    "PolicySource",
    "ProfileError",
    "RecipeConfig",
    "Resources",
    "RewardBar",
    "RolloutSection",
    "RunChanges",
    "SandboxSection",
    "ScheduleSection",
    "Seconds",
    "Seed",
    "StageName",
    "StagesSection",
    "SweepSpace",
    "SystemsStage",
    "SystemsThresholds",
    "TaskSelection",
    "TitoStage",
    "TitoThresholds",
    "TrainerBackend",
    "TransferStage",
    "TransferThresholds",
    "VllmSection",
    "apply_overrides",
    "load_profile",
    "profile_path",
    "recipe_arms",
    "resolve_profile",
    "section_digest",
    "valid_harness_changes",
    "validate_config",
]
