"""Deliberate defects a profile can inject (``defects:``) to prove each gate fails when it should (``make
gate-matrix``), and the stage whose gate must catch each."""

from __future__ import annotations

from enum import StrEnum

from flows.config.base import StageName
from trainer.algorithms.config import RewardDefect


class Defect(StrEnum):
    """Deliberate defects, each the failure one stage's gate exists to catch (``make gate-matrix`` runs them all).

    A profile lists them under ``defects`` (``--set 'defects=[wrong_oracle]'``); a healthy run lists none. Each is
    applied where the real failure would arise, and the stage's gate must fail on it with a finding naming the cause.
    """

    WRONG_ORACLE = "wrong_oracle"
    """De-risk: one checked task's oracle answers a wrong value (as a task whose expected answer was mis-authored)."""
    SLOW_TOOL = "slow_tool"
    """De-risk: ``sheets.read_cell`` answers only after seconds (the gateways serve ``BadVariant.SLOW_CELL_READ``), so
    calls past the harness's tool timeout time out."""
    WRONG_TOOL_FORMAT = "wrong_tool_format"
    """De-risk: the harness reads another tool-call dialect than the base writes (``hermes_json`` against a
    ``qwen3_xml`` base, and the other way round): a profile that names the wrong ``harness.tool_format``."""
    RETOKENIZING_HARNESS = "retokenizing_harness"
    """TITO: the harness re-renders the conversation as text and re-tokenises it, prompts and completions both."""
    PERTURBED_ENGINE_WEIGHTS = "perturbed_engine_weights"
    """Systems: the engine serves weights other than the trainer's (the policy's, with relative noise added)."""
    INVERTED_ADVANTAGES = "inverted_advantages"
    """Overfit: the advantages' sign flipped, so every step descends the reward (``trainer.algorithms.defects``)."""
    CRASHING_ARM = "crashing_arm"
    """Ablations: the first arm after the baseline crashes in its first step (``LoopConfig.crash_at_step``)."""
    IGNORED_ARM_CONFIG = "ignored_arm_config"
    """Ablations: the first arm after the baseline trains with the baseline's settings (its changes never reach the
    trainer), so none of its mechanisms acts: an inert arm."""
    SHUFFLED_REWARDS = "shuffled_rewards"
    """Hero: rewards shuffled within each prompt group: the policy trains on noise (``trainer.algorithms.defects``)."""
    DAMAGED_POLICY = "damaged_policy"
    """Transfer: the hero's policy reaches the transfer suites damaged (its weights perturbed, as a checkpoint corrupted
    or a policy that forgot), so it regresses where the base could do the task."""

    @property
    def stage(self) -> StageName:
        """The stage whose gate must fail on this defect."""
        return DEFECT_STAGES[self]


DEFECT_STAGES = {
    Defect.WRONG_ORACLE: StageName.DERISK,
    Defect.SLOW_TOOL: StageName.DERISK,
    Defect.WRONG_TOOL_FORMAT: StageName.DERISK,
    Defect.RETOKENIZING_HARNESS: StageName.TITO,
    Defect.PERTURBED_ENGINE_WEIGHTS: StageName.SYSTEMS,
    Defect.INVERTED_ADVANTAGES: StageName.OVERFIT,
    Defect.CRASHING_ARM: StageName.ABLATIONS,
    Defect.IGNORED_ARM_CONFIG: StageName.ABLATIONS,
    Defect.SHUFFLED_REWARDS: StageName.HERO,
    Defect.DAMAGED_POLICY: StageName.TRANSFER,
}
REWARD_DEFECTS = {
    Defect.INVERTED_ADVANTAGES: RewardDefect.INVERTED_ADVANTAGES,
    Defect.SHUFFLED_REWARDS: RewardDefect.SHUFFLED_REWARDS,
}
"""The defects that are bugs of the trainer's reward → advantage path, as the trainer's ``AlgorithmConfig.defect``."""
