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

from envs.lazy import lazy_exports

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "trainer.algorithms.activity": [
            "MechanismActivity",
            "length_penalty_mean",
            "overlong_dropped_share",
            "weights_vs_token_mean",
        ],
        "trainer.algorithms.advantages": [
            "ADVANTAGE_ESTIMATORS",
            "broadcast_to_tokens",
            "compute_advantages",
            "grpo_advantages",
            "normalize_by_group_std",
            "rloo_advantages",
        ],
        "trainer.algorithms.aggregation": ["AGGREGATIONS", "token_weights"],
        "trainer.algorithms.config": [
            "AdvantageEstimator",
            "Aggregation",
            "AlgorithmConfig",
            "PolicyLoss",
            "RewardDefect",
            "TisMode",
        ],
        "trainer.algorithms.defects": ["shifted_within_groups"],
        "trainer.algorithms.filters": ["adaptive_length_penalty", "overlong_filter", "zero_variance_filter"],
        "trainer.algorithms.groups": ["GroupIndex", "group_index"],
        "trainer.algorithms.losses": ["POLICY_LOSSES", "bernoulli_kl", "off_policy_correction", "policy_loss"],
        "trainer.algorithms.registry": ["Registry"],
    },
)
