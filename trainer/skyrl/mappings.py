"""Our algorithm and trainer enums → SkyRL 0.3.x config values, one table per concept (no if-chains).

Each table maps one of our enum members to the ``trainer.algorithm.*`` (or optimizer) keys that express it in SkyRL;
a member SkyRL cannot express maps to an ``Unsupported`` reason instead, and rendering it raises ``UnsupportedSetting``
naming the setting. Every member of every enum has an entry (a test holds the tables complete).

=========================  =====================================================================================
ours                       SkyRL 0.3.x
=========================  =====================================================================================
advantage grpo             ``advantage_estimator=grpo`` with ``grpo_norm_by_std`` = our ``norm_adv_by_std``
advantage rloo             ``advantage_estimator=rloo`` (SkyRL's RLOO has no std normalisation)
policy loss ppo_clip       ``policy_loss_type=regular``, ``eps_clip_low`` / ``eps_clip_high``
policy loss glm5           ``policy_loss_type=rollout_is``: r = π/μ, zero outside (1−ε_low, 1+ε_high), −sg(r)·A·log π
policy loss dppo_binary_*  ``policy_loss_type=dppo``, ``dppo.dppo_type`` binary_tv | binary_kl, ``dppo.delta_low/high``
aggregation                ``loss_reduction`` of the same name (``max_seq_len`` = L for seq_mean_token_sum_norm)
TIS none | token | seq     ``off_policy_correction.tis_ratio_type`` null | token | sequence, with its cap
geometric sequence mask    ``off_policy_correction.sequence_mask_metric=geometric``, ``geo_mask_low/high``
lr schedule constant       ``scheduler=constant_with_warmup`` (SkyRL's Megatron optimizer supports only this one)
=========================  =====================================================================================
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.errors import RecipeError
from trainer.algorithms.config import AdvantageEstimator, Aggregation, AlgorithmConfig, PolicyLoss, TisMode
from trainer.algorithms.defects import RewardDefect
from trainer.local.trainer import LRSchedule


class UnsupportedSetting(RecipeError, ValueError):
    """A setting of ours that SkyRL 0.3.x cannot express; the message names it and says what to change."""


@dataclass(frozen=True)
class Unsupported:
    """A table entry for a member SkyRL cannot express, with the reason shown to the user."""

    reason: str


AlgorithmKeys = Callable[[AlgorithmConfig], dict[str, Any]]
"""Our algorithm config → ``trainer.algorithm.*`` keys (relative to ``trainer.algorithm``)."""


def _grpo(algorithm: AlgorithmConfig) -> dict[str, Any]:
    return {"advantage_estimator": "grpo", "grpo_norm_by_std": algorithm.norm_adv_by_std}


def _rloo(algorithm: AlgorithmConfig) -> dict[str, Any]:
    if algorithm.norm_adv_by_std:
        raise UnsupportedSetting(
            "trainer.algorithm.norm_adv_by_std with advantage_estimator 'rloo' has no SkyRL equivalent "
            "(SkyRL's RLOO does not divide by the group std); set norm_adv_by_std false or use grpo"
        )
    return {"advantage_estimator": "rloo"}


ADVANTAGES: dict[AdvantageEstimator, AlgorithmKeys] = {
    AdvantageEstimator.GRPO: _grpo,
    AdvantageEstimator.RLOO: _rloo,
}


def _dppo(kind: str) -> AlgorithmKeys:
    def keys(algorithm: AlgorithmConfig) -> dict[str, Any]:
        return {
            "policy_loss_type": "dppo",
            "dppo.dppo_type": kind,
            "dppo.delta_low": algorithm.dppo_delta_low,
            "dppo.delta_high": algorithm.dppo_delta_high,
        }

    return keys


POLICY_LOSSES: dict[PolicyLoss, AlgorithmKeys] = {
    PolicyLoss.PPO_CLIP: lambda a: {
        "policy_loss_type": "regular",
        "eps_clip_low": a.ppo_eps_low,
        "eps_clip_high": a.ppo_eps_high,
    },
    PolicyLoss.GLM5: lambda a: {
        "policy_loss_type": "rollout_is",
        "eps_clip_low": a.glm5_eps_low,
        "eps_clip_high": a.glm5_eps_high,
    },
    PolicyLoss.DPPO_BINARY_TV: _dppo("binary_tv"),
    PolicyLoss.DPPO_BINARY_KL: _dppo("binary_kl"),
}

LOSS_REDUCTIONS: dict[Aggregation, AlgorithmKeys] = {
    Aggregation.TOKEN_MEAN: lambda a: {"loss_reduction": "token_mean"},
    Aggregation.SEQUENCE_MEAN: lambda a: {"loss_reduction": "sequence_mean"},
    Aggregation.SEQ_MEAN_TOKEN_SUM_NORM: lambda a: {
        "loss_reduction": "seq_mean_token_sum_norm",
        "max_seq_len": a.token_sum_norm_len,
    },
    Aggregation.PROMPT_MEAN: lambda a: {"loss_reduction": "prompt_mean"},
}

TIS_MODES: dict[TisMode, AlgorithmKeys] = {
    TisMode.NONE: lambda a: {"off_policy_correction.tis_ratio_type": None},
    TisMode.TOKEN: lambda a: {
        "off_policy_correction.tis_ratio_type": "token",
        "off_policy_correction.token_tis_ratio_clip_high": a.tis_token_cap,
    },
    TisMode.SEQUENCE: lambda a: {
        "off_policy_correction.tis_ratio_type": "sequence",
        "off_policy_correction.sequence_tis_ratio_clip_high": a.tis_sequence_cap,
    },
}

SEQUENCE_MASKS: dict[bool, AlgorithmKeys] = {
    False: lambda a: {"off_policy_correction.sequence_mask_metric": None},
    True: lambda a: {
        "off_policy_correction.sequence_mask_metric": "geometric",
        "off_policy_correction.geo_mask_low": a.geometric_mask_low,
        "off_policy_correction.geo_mask_high": a.geometric_mask_high,
    },
}

LR_SCHEDULES: dict[LRSchedule, str | Unsupported] = {
    LRSchedule.CONSTANT: "constant_with_warmup",
    LRSchedule.COSINE: Unsupported(
        "trainer.lr_schedule 'cosine' has no SkyRL Megatron equivalent (its Megatron optimizer takes only "
        "constant_with_warmup); use lr_schedule constant"
    ),
}


def algorithm_keys(algorithm: AlgorithmConfig) -> dict[str, Any]:
    """Every ``trainer.algorithm.*`` key (relative) our algorithm config sets in SkyRL, from the tables above."""
    if algorithm.defect is not RewardDefect.NONE:
        raise UnsupportedSetting(
            f"trainer.algorithm.defect {algorithm.defect.value!r} is a gate-matrix defect of our local trainer; "
            "SkyRL jobs run without defects"
        )
    keys: dict[str, Any] = {}
    for table, member in (
        (ADVANTAGES, algorithm.advantage_estimator),
        (POLICY_LOSSES, algorithm.policy_loss),
        (LOSS_REDUCTIONS, algorithm.aggregation),
        (TIS_MODES, algorithm.tis_mode),
        (SEQUENCE_MASKS, algorithm.geometric_mask),
    ):
        keys |= table[member](algorithm)
    return keys


def lr_scheduler(schedule: LRSchedule) -> str:
    """SkyRL's ``optimizer_config.scheduler`` for our schedule (``UnsupportedSetting`` when it has none)."""
    value = LR_SCHEDULES[schedule]
    if isinstance(value, Unsupported):
        raise UnsupportedSetting(value.reason)
    return value
