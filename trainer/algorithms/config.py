"""``AlgorithmConfig``: every knob of the RL algorithm layer, validated; defaults are the recipe's hero run.

Hero configuration (shared/RECIPE.md): GRPO advantages without std normalisation, DPPO binary-TV policy loss with
δ_low = δ_high = 0.15, prompt_mean token aggregation, no overlong filtering, zero-variance groups dropped at
tolerance 1e-6, no adaptive length penalty, no TIS.

Example::

    AlgorithmConfig()                                             # the hero run
    AlgorithmConfig(policy_loss=PolicyLoss.GLM5, aggregation=Aggregation.TOKEN_MEAN)  # the ablation baseline
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RewardDefect(StrEnum):
    """A deliberate bug in the reward → advantage path (``trainer.algorithms.defects``: what each does)."""

    NONE = "none"
    INVERTED_ADVANTAGES = "inverted_advantages"
    SHUFFLED_REWARDS = "shuffled_rewards"


class AdvantageEstimator(StrEnum):
    GRPO = "grpo"
    RLOO = "rloo"


class Aggregation(StrEnum):
    TOKEN_MEAN = "token_mean"
    SEQUENCE_MEAN = "sequence_mean"
    SEQ_MEAN_TOKEN_SUM_NORM = "seq_mean_token_sum_norm"
    PROMPT_MEAN = "prompt_mean"


class PolicyLoss(StrEnum):
    PPO_CLIP = "ppo_clip"
    GLM5 = "glm5"
    DPPO_BINARY_TV = "dppo_binary_tv"
    DPPO_BINARY_KL = "dppo_binary_kl"


class TisMode(StrEnum):
    NONE = "none"
    TOKEN = "token"
    SEQUENCE = "sequence"


# Losses whose per-token term already carries the rollout importance ratio π/μ; TIS on top would correct twice.
ROLLOUT_RATIO_LOSSES = frozenset({PolicyLoss.GLM5, PolicyLoss.DPPO_BINARY_TV, PolicyLoss.DPPO_BINARY_KL})


class AlgorithmConfig(BaseModel):
    """Advantages, token aggregation, policy loss, off-policy corrections, filters and shaping."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    # --- core ---------------------------------------------------------------------------------------------------
    advantage_estimator: AdvantageEstimator = AdvantageEstimator.GRPO
    """grpo: A = R − mean_g R; rloo: A = G/(G−1)·(R − mean_g R)."""
    norm_adv_by_std: bool = False
    """Divide advantages by (std_g R + 1e-6). GRPO with it is the original GRPO; without it, Dr. GRPO (hero)."""
    aggregation: Aggregation = Aggregation.PROMPT_MEAN
    """How per-token losses are reduced over the mini-batch."""
    token_sum_norm_len: int | None = Field(default=None, gt=0)
    """The fixed max length L of seq_mean_token_sum_norm (required for that aggregation only)."""
    policy_loss: PolicyLoss = PolicyLoss.DPPO_BINARY_TV
    """The per-token policy-gradient loss."""

    # --- policy-loss parameters ---------------------------------------------------------------------------------
    ppo_eps_low: float = Field(default=0.2, gt=0, lt=1)
    """PPO clip: r is clipped to [1 − ε_low, 1 + ε_high]."""
    ppo_eps_high: float = Field(default=0.2, gt=0)
    """PPO clip: upper clip offset ε_high."""
    glm5_eps_low: float = Field(default=0.5, gt=0, lt=1)
    """GLM-5 loss: tokens with r = π/μ ≤ 1 − ε_low get zero weight."""
    glm5_eps_high: float = Field(default=4.0, gt=0)
    """GLM-5 loss: tokens with r = π/μ ≥ 1 + ε_high get zero weight."""
    dppo_delta_low: float = Field(default=0.15, gt=0)
    """DPPO: divergence bound for A < 0 (probability difference for binary-TV, nats for binary-KL)."""
    dppo_delta_high: float = Field(default=0.15, gt=0)
    """DPPO: divergence bound for A > 0 (probability difference for binary-TV, nats for binary-KL)."""

    # --- off-policy corrections (π_old vs rollout μ) --------------------------------------------------------------
    tis_mode: TisMode = TisMode.NONE
    """Truncated importance sampling: weight by sg(min(π_old/μ, C)) per token or per sequence."""
    tis_token_cap: float = Field(default=2.0, gt=0)
    """C for per-token TIS."""
    tis_sequence_cap: float = Field(default=5.0, gt=0)
    """C for per-sequence TIS."""
    geometric_mask: bool = False
    """Drop a sequence whose geometric-mean ratio exp(mean_t log(π_old/μ)) is outside [low, high]."""
    geometric_mask_low: float = Field(default=0.99, gt=0, lt=1)
    """Lower bound of the geometric sequence mask."""
    geometric_mask_high: float = Field(default=1.01, gt=1)
    """Upper bound of the geometric sequence mask."""

    # --- filters and shaping --------------------------------------------------------------------------------------
    overlong_filter: bool = False
    """Loss-mask trajectories whose stop reason is not a natural stop (recipe: off, it cost 1.5 points)."""
    zero_variance_tol: float = Field(default=1e-6, ge=0)
    """Groups whose reward spread (max − min) is ≤ this carry no signal and are dropped."""
    alp_assistant_coef: float = Field(default=0.0, ge=0)
    """Adaptive length penalty per assistant token (β/N in arXiv 2506.05256); 0 turns it off."""
    alp_env_coef: float = Field(default=0.0, ge=0)
    """Adaptive length penalty per environment (tool-observation) token; 0 turns it off."""
    alp_solve_threshold: float = 1.0
    """A rollout counts as solved for the ALP solve rate when its reward is ≥ this (1.0: every criterion met)."""

    # --- deliberate defects (the gate matrix only) ----------------------------------------------------------------
    defect: RewardDefect = RewardDefect.NONE
    """A bug of the reward → advantage path (``trainer.algorithms.defects``) that a learning gate must catch; none in
    a real run."""

    @model_validator(mode="after")
    def _check_combinations(self) -> Self:
        if self.aggregation == Aggregation.SEQ_MEAN_TOKEN_SUM_NORM and self.token_sum_norm_len is None:
            raise ValueError("aggregation 'seq_mean_token_sum_norm' needs token_sum_norm_len (the fixed L)")
        if self.tis_mode != TisMode.NONE and self.policy_loss in ROLLOUT_RATIO_LOSSES:
            raise ValueError(
                f"tis_mode {self.tis_mode.value!r} cannot be combined with policy_loss {self.policy_loss.value!r}: "
                "that loss already applies the rollout importance ratio π/μ; "
                "use tis_mode 'none' or policy_loss 'ppo_clip'"
            )
        return self
