"""Per-token log-probs and entropies of the policy over a micro-batch of sequences, packed or padded.

A micro-batch is S sequences given right-padded as ``tokens_SL`` with their true ``lengths_S``. Three layouts feed
them to the transformers model:

* packed (default): the S sequences are concatenated into ONE row of N = Σ_s len_s tokens, position ids restart
  at 0 for every sequence, and attention runs causally within each sequence (``packed_attention``: per-sequence
  SDPA, Σ len² work and no N×N mask), so token j of sequence s attends exactly to tokens 0..j of s. No compute is
  spent on padding.
* padded: the (S, L) rows go in as they are with a 2-D padding mask; S·L − N positions are computed for nothing.
* shared_prefix: one packed row in which sequences that start alike (a GRPO group's prompt) hold their common
  prefix once (``prefix_sharing``); each token still attends to exactly its own sequence's tokens 0..j.

All three give the same numbers (tested against a plain per-sequence forward). The stats are aligned to the tokens, as
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
from trainer.local.packed_attention import packed_row_attention, sequence_bounds
from trainer.local.prefix_sharing import SHARED_PREFIX_SDPA, SharedPrefixPlan


@dataclass(frozen=True)
class TokenStats:
    """``logprobs_SL`` (differentiable) and ``entropy_SL`` (detached), aligned to ``tokens_SL``; 0 at t = 0 and pads."""

    logprobs_SL: Tensor
    entropy_SL: Tensor


def valid_mask(lengths_S: Tensor, length: int) -> Tensor:
    """valid_SL[s, t] = t < len_s."""
    return torch.arange(length, device=lengths_S.device)[None, :] < lengths_S[:, None]


Hidden = tuple[Tensor, Tensor]
"""Final hidden states (R, H) and, for each of the N valid tokens in row-major order, the row holding it (N,)."""


def _packed_hidden(model: PreTrainedModel, tokens_SL: Tensor, valid_SL: Tensor, lengths_S: Tensor) -> Hidden:
    """One packed row of the N valid tokens through the model, attention per sequence; token n is row n."""
    positions_SL = torch.arange(tokens_SL.shape[1], device=tokens_SL.device).expand_as(tokens_SL)
    with packed_row_attention(model):
        hidden_NH = model.model(
            input_ids=tokens_SL[valid_SL][None],
            position_ids=positions_SL[valid_SL][None],
            cu_seq_lens_q=sequence_bounds(lengths_S),
            use_cache=False,
        ).last_hidden_state[0]
    return hidden_NH, torch.arange(hidden_NH.shape[0], device=hidden_NH.device)


def _padded_hidden(model: PreTrainedModel, tokens_SL: Tensor, valid_SL: Tensor, lengths_S: Tensor) -> Hidden:
    """The right-padded rows through the model with a 2-D padding mask; the N valid tokens' hidden states in order."""
    hidden_NH = model.model(input_ids=tokens_SL, attention_mask=valid_SL.long(), use_cache=False).last_hidden_state
    return hidden_NH[valid_SL], torch.arange(int(valid_SL.sum()), device=tokens_SL.device)


def _shared_prefix_hidden(model: PreTrainedModel, tokens_SL: Tensor, valid_SL: Tensor, lengths_S: Tensor) -> Hidden:
    """One prefix-shared row (``prefix_sharing``): equal prefixes computed once; valid tokens map to their rows."""
    rows = zip(tokens_SL.tolist(), lengths_S.tolist(), strict=True)
    plan = SharedPrefixPlan.of([row[:length] for row, length in rows]).to(tokens_SL.device)
    with packed_row_attention(model, SHARED_PREFIX_SDPA):
        hidden_RH = model.model(
            input_ids=plan.input_ids_R[None],
            position_ids=plan.positions_R[None],
            shared_prefix_plan=plan,
            use_cache=False,
        ).last_hidden_state[0]
    return hidden_RH, torch.cat(plan.rows)


HiddenFn = Callable[[PreTrainedModel, Tensor, Tensor, Tensor], Hidden]
LAYOUTS: Registry[HiddenFn] = Registry("micro-batch layout")
LAYOUTS.register(Layout.PACKED)(_packed_hidden)
LAYOUTS.register(Layout.PADDED)(_padded_hidden)
LAYOUTS.register(Layout.SHARED_PREFIX)(_shared_prefix_hidden)


def token_stats(
    model: PreTrainedModel,
    tokens_SL: Tensor,
    lengths_S: Tensor,
    layout: Layout | str = Layout.PACKED,
    score_SL: Tensor | None = None,
) -> TokenStats:
    """Per-token log π and entropy of ``model`` for right-padded ``tokens_SL`` of true lengths ``lengths_S``.

    ``score_SL`` (optional, bool-like): compute the stats only where it is set (0 elsewhere). The trainer passes its
    loss mask: the vocabulary projection and softmax then run over the loss tokens only, the largest matmul of a tiny
    model and, on the prompt and tool observations it skips, most of a step's element-wise work.
    Gradients flow into ``logprobs_SL`` when grad mode is on; ``entropy_SL`` is a detached diagnostic.
    """
    if tokens_SL.dim() != 2 or lengths_S.shape != tokens_SL.shape[:1]:
        raise ValueError(
            f"tokens_SL must be (S, L) with one length per row, got {tuple(tokens_SL.shape)} and "
            f"lengths {tuple(lengths_S.shape)}"
        )
    if int(lengths_S.min()) < 1 or int(lengths_S.max()) > tokens_SL.shape[1]:
        raise ValueError(f"lengths must lie in [1, {tokens_SL.shape[1]}], got {lengths_S.tolist()}")
    if score_SL is not None and score_SL.shape != tokens_SL.shape:
        raise ValueError(f"score_SL has shape {tuple(score_SL.shape)}, tokens_SL has {tuple(tokens_SL.shape)}")
    valid_SL = valid_mask(lengths_S, tokens_SL.shape[1])
    hidden_RH, row_of_N = LAYOUTS.get(layout)(model, tokens_SL, valid_SL, lengths_S)
    scored_SL = valid_SL.clone()
    scored_SL[:, 0] = False
    if score_SL is not None:
        scored_SL &= score_SL.bool()
    # Token (s, t) is predicted by the hidden state of (s, t − 1): its row, through the valid tokens' row-major index.
    valid_index_SL = valid_SL.flatten().cumsum(0).view_as(valid_SL) - 1
    predictor_rows_M = row_of_N[valid_index_SL[:, :-1][scored_SL[:, 1:]]]
    logits_MV = model.lm_head(hidden_RH[predictor_rows_M]).float()
    log_norm_M = torch.logsumexp(logits_MV, dim=-1)
    logprobs_M = logits_MV.gather(-1, tokens_SL[scored_SL][:, None])[:, 0] - log_norm_M
    with torch.no_grad():
        entropy_M = log_norm_M - (torch.softmax(logits_MV, dim=-1) * logits_MV).sum(dim=-1)
    return TokenStats(logprobs_SL=_scatter(logprobs_M, scored_SL), entropy_SL=_scatter(entropy_M, scored_SL))


def _scatter(values_M: Tensor, scored_SL: Tensor) -> Tensor:
    """(S, L) zeros with ``values_M`` written, in order, at the True positions of ``scored_SL``."""
    out_SL = values_M.new_zeros(scored_SL.shape)
    out_SL[scored_SL] = values_M
    return out_SL
