"""Per-token log-probs and entropies of the policy over a micro-batch of sequences, packed or padded.

A micro-batch is S sequences given right-padded as ``tokens_SL`` with their true ``lengths_S``. Two layouts feed
them to the transformers model:

* packed (default): the S sequences are concatenated into ONE row of N = Σ_s len_s tokens, position ids restart
  at 0 for every sequence, and attention runs causally within each sequence (``packed_attention``: per-sequence
  SDPA, Σ len² work and no N×N mask), so token j of sequence s attends exactly to tokens 0..j of s. No compute is
  spent on padding.
* padded: the (S, L) rows go in as they are with a 2-D padding mask; S·L − N positions are computed for nothing.

Both give the same numbers (tested against a plain per-sequence forward). The stats are aligned to the tokens, as
``Trajectory.logprobs`` is:

    logprobs_SL[s, t] = log π(x_{s,t} | x_{s,<t}) = z_{s,t−1}[x_{s,t}] − logsumexp(z_{s,t−1})
    entropy_SL[s, t]  = H(π(· | x_{s,<t}))         = logsumexp(z) − Σ_v softmax(z)_v · z_v,  z = z_{s,t−1}

with z the fp32 logits; both are 0 at t = 0 (no prefix predicts the first token) and at padded positions t ≥ len_s.
The HF model is reused rather than the engine's inference-only forward (trainer/engine/forward.py): training needs
autograd through every layer and no KV cache, which transformers' modelling code already provides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel

from trainer.algorithms.registry import Registry
from trainer.local.config import Layout
from trainer.local.packed_attention import per_sequence_attention, sequence_bounds


@dataclass(frozen=True)
class TokenStats:
    """``logprobs_SL`` (differentiable) and ``entropy_SL`` (detached), aligned to ``tokens_SL``; 0 at t = 0 and pads."""

    logprobs_SL: Tensor
    entropy_SL: Tensor


def valid_mask(lengths_S: Tensor, length: int) -> Tensor:
    """valid_SL[s, t] = t < len_s."""
    return torch.arange(length, device=lengths_S.device)[None, :] < lengths_S[:, None]


def _packed_logits(model: PreTrainedModel, tokens_SL: Tensor, valid_SL: Tensor, lengths_S: Tensor) -> Tensor:
    """One packed row of the N valid tokens through the model, attention per sequence; its logits (N, V)."""
    positions_SL = torch.arange(tokens_SL.shape[1], device=tokens_SL.device).expand_as(tokens_SL)
    with per_sequence_attention(model):
        return model(
            input_ids=tokens_SL[valid_SL][None],
            position_ids=positions_SL[valid_SL][None],
            cu_seq_lens_q=sequence_bounds(lengths_S),
            use_cache=False,
        ).logits[0]


def _padded_logits(model: PreTrainedModel, tokens_SL: Tensor, valid_SL: Tensor, lengths_S: Tensor) -> Tensor:
    """The right-padded rows through the model with a 2-D padding mask; the logits of the N valid tokens (N, V)."""
    return model(input_ids=tokens_SL, attention_mask=valid_SL.long(), use_cache=False).logits[valid_SL]


LogitsFn = Callable[[PreTrainedModel, Tensor, Tensor, Tensor], Tensor]
LAYOUTS: Registry[LogitsFn] = Registry("micro-batch layout")
LAYOUTS.register(Layout.PACKED)(_packed_logits)
LAYOUTS.register(Layout.PADDED)(_padded_logits)


def token_stats(
    model: PreTrainedModel, tokens_SL: Tensor, lengths_S: Tensor, layout: Layout | str = Layout.PACKED
) -> TokenStats:
    """Per-token log π and entropy of ``model`` for right-padded ``tokens_SL`` of true lengths ``lengths_S``.

    Gradients flow into ``logprobs_SL`` when grad mode is on; ``entropy_SL`` is a detached diagnostic.
    """
    if tokens_SL.dim() != 2 or lengths_S.shape != tokens_SL.shape[:1]:
        raise ValueError(
            f"tokens_SL must be (S, L) with one length per row, got {tuple(tokens_SL.shape)} and "
            f"lengths {tuple(lengths_S.shape)}"
        )
    if int(lengths_S.min()) < 1 or int(lengths_S.max()) > tokens_SL.shape[1]:
        raise ValueError(f"lengths must lie in [1, {tokens_SL.shape[1]}], got {lengths_S.tolist()}")
    valid_SL = valid_mask(lengths_S, tokens_SL.shape[1])
    tokens_N = tokens_SL[valid_SL]
    # Valid positions in row-major order keep each sequence contiguous, so token j is predicted by the logits at
    # j − 1 whenever j is not the first token of its sequence.
    logits_NV = LAYOUTS.get(layout)(model, tokens_SL, valid_SL, lengths_S).float()[:-1]
    log_norm_N = torch.logsumexp(logits_NV, dim=-1)
    logprobs_N = logits_NV.gather(-1, tokens_N[1:, None])[:, 0] - log_norm_N
    with torch.no_grad():
        entropy_N = log_norm_N - (torch.softmax(logits_NV, dim=-1) * logits_NV).sum(dim=-1)
    scored_SL = valid_SL.clone()
    scored_SL[:, 0] = False
    scored_N = scored_SL[valid_SL][1:]
    return TokenStats(
        logprobs_SL=_scatter(logprobs_N, scored_N, scored_SL), entropy_SL=_scatter(entropy_N, scored_N, scored_SL)
    )


def _scatter(values_N: Tensor, keep_N: Tensor, scored_SL: Tensor) -> Tensor:
    """(S, L) zeros with ``values_N[keep_N]`` written, in order, at the True positions of ``scored_SL``."""
    out_SL = values_N.new_zeros(scored_SL.shape)
    out_SL[scored_SL] = values_N[keep_N]
    return out_SL
