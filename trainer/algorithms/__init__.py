"""RL algorithms as pure torch functions: advantages, token aggregation, policy losses, filters and shaping.

Typical use for one mini-batch (B trajectories, T token positions)::

    config = AlgorithmConfig()                                            # the recipe's hero configuration
    advantages_B = compute_advantages(rewards_B, group_ids_B, config)
    advantages_BT = broadcast_to_tokens(advantages_B, loss_mask_BT)
    weights_BT = token_weights(loss_mask_BT, group_ids_B, config.aggregation, config.token_sum_norm_len)
    for rows in micro_batches:                                            # any split gives the same total
        loss, metrics = policy_loss(logprobs_BT[rows], rollout_logprobs_BT[rows], advantages_BT[rows],
                                    loss_mask_BT[rows], weights_BT[rows], config)
        loss.backward()
"""

from trainer.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    broadcast_to_tokens,
    compute_advantages,
    grpo_advantages,
    normalize_by_group_std,
    rloo_advantages,
)
from trainer.algorithms.aggregation import AGGREGATIONS, token_weights
from trainer.algorithms.config import AdvantageEstimator, Aggregation, AlgorithmConfig, PolicyLoss, TisMode
from trainer.algorithms.filters import adaptive_length_penalty, overlong_filter, zero_variance_filter
from trainer.algorithms.groups import GroupIndex, group_index
from trainer.algorithms.losses import POLICY_LOSSES, bernoulli_kl, off_policy_correction, policy_loss
from trainer.algorithms.registry import Registry

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "POLICY_LOSSES",
    "AdvantageEstimator",
    "Aggregation",
    "AlgorithmConfig",
    "GroupIndex",
    "PolicyLoss",
    "Registry",
    "TisMode",
    "adaptive_length_penalty",
    "bernoulli_kl",
    "broadcast_to_tokens",
    "compute_advantages",
    "group_index",
    "grpo_advantages",
    "normalize_by_group_std",
    "off_policy_correction",
    "overlong_filter",
    "policy_loss",
    "rloo_advantages",
    "token_weights",
    "zero_variance_filter",
]
