"""Per-sequence attention over a packed row: causal SDPA on each sequence's slice, so the cost is Σ len², not N².

A packed row holds S sequences back to back (N = Σ len tokens). A dense block-diagonal N×N mask would make every
layer compute and mask all N² query-key scores, most of them across sequences; on the tiny default model that made
packing slower than padding. Instead the packed forward passes the sequence boundaries as ``cu_seq_lens_q``
(transformers' variable-length keyword: 0, len_0, len_0 + len_1, …, N) and runs the model under the attention
implementation registered here, which calls transformers' own ``sdpa_attention_forward`` once per sequence with a
plain causal mask (GQA, scaling and dropout handled there). It is not in transformers' mask registry, so the model
builds no mask at all for it.

On CUDA in half precision the whole packed row goes to one flash-attention kernel instead
(``torch.nn.attention.varlen.varlen_attn`` with the same offsets, causal window, GQA): the per-sequence loop launches
a few kernels per sequence and layer, which on a GPU costs more than the attention itself (measured on an H200, bf16,
tiny model: packed ran at 0.68x padded with the loop).

    with packed_row_attention(model):
        logits = model(input_ids=ids_1N, position_ids=positions_1N, cu_seq_lens_q=bounds, use_cache=False).logits
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

try:  # torch's flash-attention varlen entry point (CUDA only); older builds run the per-sequence loop everywhere
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # pragma: no cover - depends on the torch build
    varlen_attn = None

PER_SEQUENCE_SDPA = "per_sequence_sdpa"
# The implementations per-sequence SDPA reproduces (same math); flash kernels have their own varlen path.
SDPA_EQUIVALENT = frozenset({"eager", "sdpa"})


def per_sequence_sdpa(
    module: nn.Module,
    query_1HNd: Tensor,
    key_1KNd: Tensor,
    value_1KNd: Tensor,
    attention_mask: Tensor | None,
    cu_seq_lens_q: Tensor | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """Causal SDPA within each sequence ``cu_seq_lens_q[s] : cu_seq_lens_q[s + 1]`` of the packed row; (1, N, H, d)."""
    if cu_seq_lens_q is None or attention_mask is not None:
        raise ValueError(f"{PER_SEQUENCE_SDPA} needs the packed row's cu_seq_lens_q and no attention mask")
    lengths_S = cu_seq_lens_q[1:] - cu_seq_lens_q[:-1]
    if fused_varlen_applies(query_1HNd, kwargs.get("dropout", 0.0)):
        # KV heads repeated for GQA here: torch builds before 2.13 have no enable_gqa on varlen_attn
        groups = query_1HNd.shape[1] // key_1KNd.shape[1]
        key_NHd, value_NHd = (t[0].transpose(0, 1).repeat_interleave(groups, dim=1) for t in (key_1KNd, value_1KNd))
        longest = int(lengths_S.max())
        out_NHd = varlen_attn(
            query_1HNd[0].transpose(0, 1),
            key_NHd,
            value_NHd,
            cu_seq_lens_q,
            cu_seq_lens_q,
            longest,
            longest,
            scale=kwargs.get("scaling"),
            window_size=(-1, 0),
        )
        return out_NHd[None], None
    # One split per tensor, not a slice per sequence: a slice's backward writes its gradient into a zeroed copy of the
    # whole row (S full-row writes per tensor and layer: a third of a bootstrap step), split's backward is one cat.
    per_sequence = zip(*(t.split(lengths_S.tolist(), dim=2) for t in (query_1HNd, key_1KNd, value_1KNd)), strict=True)
    outputs = [
        sdpa_attention_forward(module, query, key, value, None, is_causal=True, **kwargs)[0]
        for query, key, value in per_sequence
    ]
    return torch.cat(outputs, dim=1), None


AttentionInterface.register(PER_SEQUENCE_SDPA, per_sequence_sdpa)


def fused_varlen_applies(query: Tensor, dropout: float) -> bool:
    """Whether the packed row can go to the flash varlen kernel: CUDA, half precision, no dropout (it has none)."""
    return varlen_attn is not None and query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and dropout == 0


def sequence_bounds(lengths_S: Tensor) -> Tensor:
    """cu_seq_lens: (S + 1,) int32 offsets 0, len_0, len_0 + len_1, …, Σ len."""
    return torch.nn.functional.pad(lengths_S.cumsum(0), (1, 0)).to(torch.int32)


@contextmanager
def packed_row_attention(model: PreTrainedModel, implementation: str = PER_SEQUENCE_SDPA) -> Iterator[None]:
    """Run ``model``'s forwards inside under a packed row's attention (``PER_SEQUENCE_SDPA`` or
    ``prefix_sharing.SHARED_PREFIX_SDPA``), then restore its own attention implementation.

    Only the forward reads the implementation; the backward replays the recorded graph, so it may run after exit.
    """
    own = model.config._attn_implementation
    if own not in SDPA_EQUIVALENT:
        raise ValueError(
            f"the packed layouts run their own SDPA in place of the model's attention, which matches only "
            f"{sorted(SDPA_EQUIVALENT)}; the model uses {own!r}: use layout 'padded' or load the model with "
            f"attn_implementation='sdpa'"
        )
    model.config._attn_implementation = implementation
    try:
        yield
    finally:
        model.config._attn_implementation = own
