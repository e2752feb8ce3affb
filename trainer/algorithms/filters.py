"""Batch filters and reward shaping: overlong filtering, the zero-variance group filter, adaptive length penalty.

* Overlong filtering (DAPO, arXiv 2503.14476): trajectories that did not end with a natural stop (truncated by
  length, context, timeout or error) are taken out of the loss. The recipe measured −1.5 points and keeps it off.
* Zero-variance filter (DAPO "dynamic sampling"): a group whose rewards are all equal has zero advantage for every
  member and carries no signal; drop it (the async loop refills the batch).
* Adaptive length penalty (ALP, Xiang et al., arXiv 2506.05256): a length cost scaled by the prompt's solve rate,
  so easy prompts are pushed to be short and hard ones are left alone. The recipe found it neutral to negative.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from trainer.algorithms.groups import GroupIds, group_index

NATURAL_STOP = "stop"


def overlong_filter(loss_mask_BT: torch.Tensor, stop_reasons_B: Sequence[str]) -> torch.Tensor:
    """The loss mask with every row zeroed whose stop reason is not ``"stop"`` (length, context_length, timeout…)."""
    if len(stop_reasons_B) != loss_mask_BT.shape[0]:
        raise ValueError(
            f"stop_reasons_B has {len(stop_reasons_B)} entries but loss_mask_BT has {loss_mask_BT.shape[0]} rows"
        )
    natural_B = torch.tensor([reason == NATURAL_STOP for reason in stop_reasons_B], device=loss_mask_BT.device)
    return loss_mask_BT * natural_B[:, None].to(loss_mask_BT.dtype)


def zero_variance_filter(rewards_B: torch.Tensor, group_ids_B: GroupIds, tol: float) -> list[Hashable]:
    """Ids of the groups to keep, in first-appearance order: those whose reward spread max − min exceeds ``tol``."""
    if rewards_B.dim() != 1:
        raise ValueError(f"rewards_B must be 1-D (one reward per trajectory), got shape {tuple(rewards_B.shape)}")
    if tol < 0:
        raise ValueError(f"zero-variance tolerance must be ≥ 0, got {tol}")
    rewards_B = rewards_B if rewards_B.is_floating_point() else rewards_B.to(torch.get_default_dtype())
    groups = group_index(group_ids_B, rewards_B.shape[0], rewards_B.device)
    empty_P = torch.zeros(groups.num_groups, dtype=rewards_B.dtype, device=rewards_B.device)
    max_P = empty_P.scatter_reduce(0, groups.index_B, rewards_B, reduce="amax", include_self=False)
    min_P = empty_P.scatter_reduce(0, groups.index_B, rewards_B, reduce="amin", include_self=False)
    spread_P = max_P - min_P
    return [group_id for group_id, spread in zip(groups.ids_P, spread_P.tolist(), strict=True) if spread > tol]


def adaptive_length_penalty(
    rewards_B: torch.Tensor,
    group_ids_B: GroupIds,
    assistant_tokens_B: torch.Tensor,
    env_tokens_B: torch.Tensor,
    *,
    assistant_coef: float,
    env_coef: float,
    solve_threshold: float = 1.0,
) -> torch.Tensor:
    """Per-trajectory ALP penalty; the shaped reward is ``rewards_B − penalty_B``.

    The paper's reward is r = 1[correct] − (β/N)·max(p_solved(q), 1/K)·|y| with p_solved the share of the K
    rollouts of prompt q that are correct. Here, with rubric rewards and tool-using agents:

        penalty_i = max(p_g, 1/K_g) · (β_assistant · n_assistant_i + β_env · n_env_i)

    where g is trajectory i's prompt group of K_g samples, p_g = (1/K_g) Σ_{j∈g} 1[R_j ≥ solve_threshold],
    n_assistant_i / n_env_i its assistant-generated / environment (tool observation) token counts and β the
    per-token coefficients (the paper's β/N). The floor 1/K_g keeps a small pressure on never-solved prompts.
    """
    batch_size = rewards_B.shape[0]
    for name, tokens_B in (("assistant_tokens_B", assistant_tokens_B), ("env_tokens_B", env_tokens_B)):
        if tokens_B.shape != (batch_size,):
            raise ValueError(f"{name} has shape {tuple(tokens_B.shape)}, expected ({batch_size},) like rewards_B")
    if assistant_coef < 0 or env_coef < 0:
        raise ValueError(f"ALP coefficients must be ≥ 0, got assistant {assistant_coef}, env {env_coef}")
    dtype = rewards_B.dtype if rewards_B.is_floating_point() else torch.get_default_dtype()
    groups = group_index(group_ids_B, batch_size, rewards_B.device)
    sizes_P = groups.sizes_P.to(dtype)
    solve_rate_P = groups.sum_P((rewards_B >= solve_threshold).to(dtype)) / sizes_P
    scale_B = torch.maximum(solve_rate_P, 1 / sizes_P)[groups.index_B]
    return scale_B * (assistant_coef * assistant_tokens_B.to(dtype) + env_coef * env_tokens_B.to(dtype))
