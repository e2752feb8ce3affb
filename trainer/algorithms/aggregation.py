"""Token aggregation as per-token weights, so the loss is a plain masked sum Σ w·ℓ.

Over a mini-batch of B sequences in P prompt groups, with T_i loss-masked tokens in sequence i (shared/RECIPE.md):

* token_mean:               Σ_{i,t} ℓ_{i,t} / Σ_i T_i                      → w_{i,t} = 1 / Σ_j T_j
* sequence_mean:            (1/B) Σ_i (1/T_i) Σ_t ℓ_{i,t}                   → w_{i,t} = 1 / (B · T_i)
* seq_mean_token_sum_norm:  (1/B) Σ_i Σ_t ℓ_{i,t} / L   (Dr. GRPO)          → w_{i,t} = 1 / (B · L)
* prompt_mean:              (1/P) Σ_p Σ_{i∈p} Σ_t ℓ_{i,t} / Σ_{i∈p} T_i     → w_{i,t} = 1 / (P · T_{p(i)})

(w is 0 on tokens outside the loss mask.) B and P count every sequence and group of the mini-batch as the
formulas state, so a sequence or group with no loss tokens contributes 0 and keeps its share of the denominator.

Why weights: the denominators are mini-batch totals. Computing the weights once for the whole mini-batch and
then summing w·ℓ over any split into micro-batches gives the same loss and gradient as one pass over the whole
mini-batch — the "pre-scale, then masked sum" trick (SkyRL). prompt_mean gives each prompt group the same total
weight 1/P, so 128k-token rollouts cannot dominate the gradient the way they do under token_mean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainer.algorithms.config import Aggregation
from trainer.algorithms.groups import GroupIds, GroupIndex, group_index
from trainer.algorithms.registry import Registry


@dataclass(frozen=True)
class AggregationInputs:
    """What a weighting needs: the float loss mask, T_i per sequence, the group index and the fixed length L."""

    mask_BT: torch.Tensor
    tokens_B: torch.Tensor
    groups: GroupIndex
    max_len: int | None


AggregationFn = Callable[[AggregationInputs], torch.Tensor]
AGGREGATIONS: Registry[AggregationFn] = Registry("token aggregation")


@AGGREGATIONS.register(Aggregation.TOKEN_MEAN)
def token_mean_weights(inputs: AggregationInputs) -> torch.Tensor:
    """w_{i,t} = mask_{i,t} / Σ_j T_j (all zero when the mini-batch has no loss tokens)."""
    return inputs.mask_BT / inputs.tokens_B.sum().clamp(min=1)


@AGGREGATIONS.register(Aggregation.SEQUENCE_MEAN)
def sequence_mean_weights(inputs: AggregationInputs) -> torch.Tensor:
    """w_{i,t} = mask_{i,t} / (B · T_i)."""
    batch_size = inputs.mask_BT.shape[0]
    return inputs.mask_BT / (batch_size * inputs.tokens_B.clamp(min=1))[:, None]


@AGGREGATIONS.register(Aggregation.SEQ_MEAN_TOKEN_SUM_NORM)
def seq_mean_token_sum_norm_weights(inputs: AggregationInputs) -> torch.Tensor:
    """w_{i,t} = mask_{i,t} / (B · L), L the fixed max length (Dr. GRPO, arXiv 2503.20783)."""
    if inputs.max_len is None or inputs.max_len <= 0:
        raise ValueError(f"seq_mean_token_sum_norm needs a positive fixed max length L, got {inputs.max_len}")
    return inputs.mask_BT / (inputs.mask_BT.shape[0] * inputs.max_len)


@AGGREGATIONS.register(Aggregation.PROMPT_MEAN)
def prompt_mean_weights(inputs: AggregationInputs) -> torch.Tensor:
    """w_{i,t} = mask_{i,t} / (P · Σ_{j∈p(i)} T_j): every prompt group carries total weight 1/P."""
    group_tokens_B = inputs.groups.sum_P(inputs.tokens_B)[inputs.groups.index_B]
    return inputs.mask_BT / (inputs.groups.num_groups * group_tokens_B.clamp(min=1))[:, None]


def token_weights(
    loss_mask_BT: torch.Tensor, group_ids_B: GroupIds, mode: Aggregation | str, max_len: int | None = None
) -> torch.Tensor:
    """Per-token weights of ``mode`` over the whole mini-batch; the aggregated loss is Σ weights_BT · ℓ_BT.

    ``loss_mask_BT`` is 1 on tokens the policy generated (bool, int or float), ``group_ids_B`` names each
    sequence's prompt group, ``max_len`` is L for seq_mean_token_sum_norm. Returns float weights of shape (B, T).
    """
    if loss_mask_BT.dim() != 2:
        raise ValueError(f"loss_mask_BT must be 2-D (B, T), got shape {tuple(loss_mask_BT.shape)}")
    dtype = loss_mask_BT.dtype if loss_mask_BT.is_floating_point() else torch.get_default_dtype()
    mask_BT = loss_mask_BT.to(dtype)
    groups = group_index(group_ids_B, mask_BT.shape[0], mask_BT.device)
    inputs = AggregationInputs(mask_BT=mask_BT, tokens_B=mask_BT.sum(dim=1), groups=groups, max_len=max_len)
    return AGGREGATIONS.get(mode)(inputs)
