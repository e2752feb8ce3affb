"""Outcome advantage estimators over prompt groups, and their broadcast to tokens.

Each trajectory i of a prompt group g (G samples) has one scalar reward R_i. Estimators (shared/RECIPE.md):

* GRPO (DeepSeekMath, arXiv 2402.03300):       A_i = (R_i − mean_g R) / (std_g R + 1e-6), std unbiased (N − 1)
* Dr. GRPO (arXiv 2503.20783), no std:         A_i = R_i − mean_g R
* RLOO (Ahmadian et al., arXiv 2402.14740):    A_i = G/(G−1) · (R_i − mean_g R) = R_i − mean of the other G−1

The estimators here return the centred advantage; ``norm_adv_by_std`` divides any of them by the group std, so
GRPO = ``grpo`` + std, Dr. GRPO = ``grpo`` alone (the recipe's hero run). A group of one sample has no baseline:
its mean is taken as 0 and its std as 1 (as SkyRL/verl do), so A_i = R_i (÷ (1 + 1e-6) with std), and RLOO's
factor G/(G−1) is taken as 1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from trainer.algorithms.config import AdvantageEstimator, AlgorithmConfig
from trainer.algorithms.groups import GroupIds, GroupIndex, group_index
from trainer.algorithms.registry import Registry

STD_EPS = 1e-6

AdvantageFn = Callable[[torch.Tensor, GroupIds], torch.Tensor]
ADVANTAGE_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator")


def _grouped(rewards_B: torch.Tensor, group_ids_B: GroupIds) -> tuple[torch.Tensor, GroupIndex]:
    """Checked float rewards and their dense group index."""
    if rewards_B.dim() != 1:
        raise ValueError(f"rewards_B must be 1-D (one reward per trajectory), got shape {tuple(rewards_B.shape)}")
    rewards_B = rewards_B if rewards_B.is_floating_point() else rewards_B.to(torch.get_default_dtype())
    return rewards_B, group_index(group_ids_B, rewards_B.shape[0], rewards_B.device)


def _group_mean_B(rewards_B: torch.Tensor, groups: GroupIndex) -> torch.Tensor:
    """mean_g R broadcast back to trajectories; 0 for groups of one."""
    sizes_P = groups.sizes_P.to(rewards_B.dtype)
    mean_P = torch.where(sizes_P > 1, groups.sum_P(rewards_B) / sizes_P, torch.zeros_like(sizes_P))
    return mean_P[groups.index_B]


@ADVANTAGE_ESTIMATORS.register(AdvantageEstimator.GRPO)
def grpo_advantages(rewards_B: torch.Tensor, group_ids_B: GroupIds) -> torch.Tensor:
    """GRPO / Dr. GRPO centred advantage A_i = R_i − mean_g R (the std division is ``normalize_by_group_std``)."""
    rewards_B, groups = _grouped(rewards_B, group_ids_B)
    return rewards_B - _group_mean_B(rewards_B, groups)


@ADVANTAGE_ESTIMATORS.register(AdvantageEstimator.RLOO)
def rloo_advantages(rewards_B: torch.Tensor, group_ids_B: GroupIds) -> torch.Tensor:
    """RLOO leave-one-out advantage A_i = G/(G−1) · (R_i − mean_g R); factor 1 for a group of one."""
    rewards_B, groups = _grouped(rewards_B, group_ids_B)
    sizes_B = groups.sizes_P[groups.index_B].to(rewards_B.dtype)
    factor_B = torch.where(sizes_B > 1, sizes_B / (sizes_B - 1).clamp(min=1), torch.ones_like(sizes_B))
    return factor_B * (rewards_B - _group_mean_B(rewards_B, groups))


def normalize_by_group_std(advantages_B: torch.Tensor, rewards_B: torch.Tensor, group_ids_B: GroupIds) -> torch.Tensor:
    """A_i / (std_g R + 1e-6) with the unbiased std sqrt(Σ (R − mean)² / (N − 1)); std 1 for a group of one."""
    rewards_B, groups = _grouped(rewards_B, group_ids_B)
    sizes_P = groups.sizes_P.to(rewards_B.dtype)
    squared_dev_P = groups.sum_P((rewards_B - _group_mean_B(rewards_B, groups)) ** 2)
    std_P = torch.where(sizes_P > 1, (squared_dev_P / (sizes_P - 1).clamp(min=1)).sqrt(), torch.ones_like(sizes_P))
    return advantages_B / (std_P[groups.index_B] + STD_EPS)


def compute_advantages(rewards_B: torch.Tensor, group_ids_B: GroupIds, config: AlgorithmConfig) -> torch.Tensor:
    """Per-trajectory advantages of the configured estimator, std-normalised when configured; shape (B,)."""
    advantages_B = ADVANTAGE_ESTIMATORS.get(config.advantage_estimator)(rewards_B, group_ids_B)
    if config.norm_adv_by_std:
        advantages_B = normalize_by_group_std(advantages_B, rewards_B, group_ids_B)
    return advantages_B


def broadcast_to_tokens(advantages_B: torch.Tensor, loss_mask_BT: torch.Tensor) -> torch.Tensor:
    """advantages_BT[i, t] = A_i on loss-masked tokens, 0 elsewhere."""
    if loss_mask_BT.dim() != 2 or loss_mask_BT.shape[0] != advantages_B.shape[0]:
        raise ValueError(
            f"loss_mask_BT of shape {tuple(loss_mask_BT.shape)} does not match advantages_B of shape "
            f"{tuple(advantages_B.shape)}: expected (B, T) with B = {advantages_B.shape[0]}"
        )
    return advantages_B[:, None] * loss_mask_BT.to(advantages_B.dtype)
