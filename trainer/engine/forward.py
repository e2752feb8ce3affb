"""A lean Qwen3 forward pass in pure torch over a compact slot KV cache, for batched prefill and decode.

One layer, as in transformers' `modeling_qwen3.py`:

    h   = x + o_proj(attn(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))), v_proj(rms(x))))
    out = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))

with rms(x) = w * x / sqrt(mean(x^2) + eps) (computed in fp32), q/k-norm an RMSNorm over each head's head_dim,
RoPE rotate-half with inv_freq from the model's rotary embedding, grouped-query attention (kv heads shared by
heads / kv_heads query heads) scaled by head_dim^-0.5, and logits = lm_head(rms(x_last)).

Speed (a decode step of a tiny model is dominated by per-op overhead, not FLOPs): q/k/v and gate/up are fused into
one matmul each (`ModelWeights` holds fused, layer-stacked *copies*, so an update of the HF model must go through
`ModelWeights.from_hf` again, which `Engine.update_weights` does); RoPE cos/sin come from a table built once; and a
batch always occupies a contiguous range of KV slots, so attention reads the cache as a view — no gather per layer.

Batched layout: row b holds `T` new tokens of one sequence at positions start_b .. start_b + T - 1 (rows shorter
than T are right-padded; their padded positions are written to the cache but never attended to, because a query at
position p only sees keys at positions <= p and a later real token overwrites the padded slot before it is read).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx.experimental._config as fx_config
import torch.nn.functional as F
from torch import Tensor
from transformers import Qwen3ForCausalLM

from trainer.engine.kernels import DecodeAttention, decode_attention_op


@dataclass(frozen=True)
class LayerWeights:
    """Every decoder layer's weights, stacked over layers ([layers, ...], nn.Linear layout [out, in] after that);
    qkv = [q; k; v] and gate_up = [gate; up] rows; qk_norm [layers, heads + kv_heads, head_dim] holds q_norm's
    weight for each query head, then k_norm's for each kv head. One tensor per kind, not per layer: a compiled step
    guards on every tensor argument on every call, and 7 guards cost far less than 7 × layers."""

    input_norm: Tensor
    qkv_proj: Tensor
    o_proj: Tensor
    qk_norm: Tensor
    post_norm: Tensor
    gate_up_proj: Tensor
    down_proj: Tensor


@dataclass(frozen=True)
class ModelWeights:
    """A Qwen3ForCausalLM's weights in the forward's layout, plus RoPE tables for positions [0, max_len)."""

    embed: Tensor
    layers: LayerWeights
    final_norm: Tensor
    lm_head: Tensor
    cos_PD: Tensor
    signed_sin_PD: Tensor  # [-sin, +sin] over the two halves of head_dim, see `apply_rope`
    eps: float
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate: int

    @classmethod
    def from_hf(cls, model: Qwen3ForCausalLM, max_len: int) -> ModelWeights:
        """Stacked, fused copies of the layers' weights (embedding and output layer by reference), cos/sin for
        `max_len` positions."""
        cfg = model.config
        if cfg.model_type != "qwen3":
            raise ValueError(f"the engine runs Qwen3 models, got model_type={cfg.model_type!r}")
        if any(getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers):
            raise ValueError("sliding-window attention layers are not supported by the local engine")
        hf_layers = model.model.layers
        with torch.no_grad():

            def stack(per_layer: Callable[[Any], Tensor]) -> Tensor:
                return torch.stack([per_layer(layer).detach() for layer in hf_layers])

            layers = LayerWeights(
                input_norm=stack(lambda layer: layer.input_layernorm.weight),
                qkv_proj=stack(
                    lambda layer: torch.cat(
                        [layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight]
                    )
                ),
                o_proj=stack(lambda layer: layer.self_attn.o_proj.weight),
                qk_norm=stack(
                    lambda layer: torch.cat(
                        [
                            layer.self_attn.q_norm.weight.expand(cfg.num_attention_heads, -1),
                            layer.self_attn.k_norm.weight.expand(cfg.num_key_value_heads, -1),
                        ]
                    )
                ),
                post_norm=stack(lambda layer: layer.post_attention_layernorm.weight),
                gate_up_proj=stack(lambda layer: torch.cat([layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight])),
                down_proj=stack(lambda layer: layer.mlp.down_proj.weight),
            )
        rotary = model.model.rotary_emb
        # As transformers' Qwen3RotaryEmbedding: freqs = pos * inv_freq (fp32), emb = [freqs, freqs], times scaling.
        freqs_PD = torch.arange(max_len, device=rotary.inv_freq.device).float()[:, None] * rotary.inv_freq.float()
        emb_PD = torch.cat((freqs_PD, freqs_PD), dim=-1)
        dtype = model.model.embed_tokens.weight.dtype
        scaling = float(rotary.attention_scaling)
        sin_PD = (emb_PD.sin() * scaling).to(dtype)
        half = sin_PD.shape[-1] // 2
        weights = cls(
            embed=model.model.embed_tokens.weight.detach(),
            layers=layers,
            final_norm=model.model.norm.weight.detach(),
            lm_head=model.lm_head.weight.detach(),
            cos_PD=(emb_PD.cos() * scaling).to(dtype),
            signed_sin_PD=torch.cat((-sin_PD[:, :half], sin_PD[:, half:]), dim=-1),
            eps=float(cfg.rms_norm_eps),
            n_layers=len(hf_layers),
            n_heads=cfg.num_attention_heads,
            n_kv_heads=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
            intermediate=cfg.intermediate_size,
        )
        for tensor in (weights.embed, weights.final_norm, weights.lm_head, *vars(layers).values()):
            torch._dynamo.mark_static(tensor)
        for table in (weights.cos_PD, weights.signed_sin_PD):
            torch._dynamo.mark_static(table, 1)  # head_dim; the length (max_len) may differ between engines
        return weights


class KVPool:
    """Keys and values for `n_slots` live sequences plus `n_parked` parked ones (see prefix_cache.py):
    [layers, n_slots + n_parked, kv_heads, capacity, head_dim] each.

    Live sequences always fill slots 0 .. n_used - 1: `release` moves the last live slot into the hole, so a batch
    of consecutive slots is a plain view of the cache; parked slots come after slot n_slots - 1. Capacity grows by
    doubling (copying the live prefix) so memory follows the longest sequence rather than the model's maximum context.
    """

    @torch.inference_mode()  # inference tensors from the start, like `ensure_capacity`'s (a compiled step guards on it)
    def __init__(self, weights: ModelWeights, n_slots: int, initial_capacity: int = 256, n_parked: int = 0) -> None:
        shape = (weights.n_layers, n_slots + n_parked, weights.n_kv_heads, initial_capacity, weights.head_dim)
        zeros = torch.zeros(shape, dtype=weights.embed.dtype, device=weights.embed.device)
        self._set_caches(zeros, torch.zeros_like(zeros))
        self.n_slots = n_slots
        self.n_used = 0

    def _set_caches(self, k: Tensor, v: Tensor) -> None:
        """Hold `k` and `v` as the caches; their layer, kv-head and head_dim sizes are the model's and never change,
        which a compiled step may bake in (`ModelWeights.from_hf`), unlike slots and capacity."""
        self.k, self.v = k, v
        for cache in (self.k, self.v):
            torch._dynamo.mark_static(cache, [0, 2, 4])

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @property
    def n_free(self) -> int:
        return self.n_slots - self.n_used

    @property
    def parked_slots(self) -> range:
        """The slots after the live ones, kept for the prefix cache."""
        return range(self.n_slots, self.k.shape[1])

    def allocate(self) -> int:
        if not self.n_free:
            raise RuntimeError("KV pool has no free slot")
        self.n_used += 1
        return self.n_used - 1

    @torch.inference_mode()  # the cache holds inference tensors (written by `forward`)
    def release(self, slot: int, moved_length: int | None = None) -> int | None:
        """Free `slot`; return the slot whose sequence now lives in `slot` instead (None if it was the last).
        `moved_length`: how many leading positions of the last slot's sequence are live (default: the capacity),
        so that only those are copied."""
        if not 0 <= slot < self.n_used:
            raise ValueError(f"slot {slot} is not in use (slots in use: 0..{self.n_used - 1})")
        self.n_used -= 1
        last = self.n_used
        if slot == last:
            return None
        live = slice(0, moved_length)
        self.k[:, slot, :, live] = self.k[:, last, :, live]
        self.v[:, slot, :, live] = self.v[:, last, :, live]
        return last

    @torch.inference_mode()
    def ensure_capacity(self, length: int) -> None:
        if length <= self.capacity:
            return
        new_cap = self.capacity
        while new_cap < length:
            new_cap *= 2
        grown_k = self.k.new_zeros((*self.k.shape[:3], new_cap, self.k.shape[4]))
        grown_v = torch.zeros_like(grown_k)
        grown_k[:, :, :, : self.capacity] = self.k
        grown_v[:, :, :, : self.capacity] = self.v
        self._set_caches(grown_k, grown_v)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """w * x / sqrt(mean(x^2, last axis) + eps), in fp32 like transformers' Qwen3RMSNorm."""
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def additive_mask(hidden: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where `hidden` is False, -inf where it is True: a mask added to attention scores (SDPA takes it as is, where a
    boolean one is converted in every call)."""
    return torch.zeros(hidden.shape, dtype=dtype, device=hidden.device).masked_fill_(hidden, float("-inf"))


def apply_rope(x_BTHD: Tensor, cos_BT1D: Tensor, signed_sin_BT1D: Tensor) -> Tensor:
    """x*cos + rotate_half(x)*sin, rotate_half([a, b]) = [-b, a] over the two halves of head_dim.

    Computed as x*cos + roll(x, half)*[-sin_a, sin_b]: roll gives [b, a], and (-b)*s == b*(-s) exactly in IEEE.
    """
    return x_BTHD * cos_BT1D + x_BTHD.roll(x_BTHD.shape[-1] // 2, dims=-1) * signed_sin_BT1D


@torch.inference_mode()
def forward(
    w: ModelWeights, pool: KVPool, first_slot: int, tokens_BT: Tensor, start_B: Tensor, last_B: Tensor
) -> Tensor:
    """Run `tokens_BT` (row b → KV slot first_slot + b) through the model, append their keys/values to the cache and
    return fp32 logits [B, V] at in-row index `last_B` (the last real token of each row)."""
    B, T = tokens_BT.shape
    H, KV, D = w.n_heads, w.n_kv_heads, w.head_dim
    pos_BT = start_B[:, None] + torch.arange(T, device=tokens_BT.device)[None, :] if T > 1 else start_B[:, None]
    n_keys = int(pos_BT.max()) + 1
    pool.ensure_capacity(n_keys)
    cos_BT1D = F.embedding(pos_BT, w.cos_PD)[:, :, None]
    sin_BT1D = F.embedding(pos_BT, w.signed_sin_PD)[:, :, None]
    # Query at position p may read keys at positions <= p of its own sequence. When every row starts at 0 that is
    # plain causal attention over the rows' own new keys: SDPA's is_causal kernel, ~2x faster than an explicit mask.
    # Otherwise an additive mask, built once: SDPA turns a boolean one into it in every layer (~12 % of its time for
    # 4 rows x 49 new tokens over 700 keys).
    fresh = T > 1 and not bool(start_B.any())
    mask_B1TK = None
    if not fresh:
        future_BTK = torch.arange(n_keys, device=tokens_BT.device)[None, None, :] > pos_BT[:, :, None]
        mask_B1TK = additive_mask(future_BTK, w.embed.dtype)[:, None]
    rows_B1 = torch.arange(B, device=tokens_BT.device)[:, None]
    slots = slice(first_slot, first_slot + B)

    x = F.embedding(tokens_BT, w.embed)
    lw = w.layers
    for i in range(w.n_layers):
        qkv = F.linear(rms_norm(x, lw.input_norm[i], w.eps), lw.qkv_proj[i]).view(B, T, H + 2 * KV, D)
        qk = apply_rope(rms_norm(qkv[:, :, : H + KV], lw.qk_norm[i], w.eps), cos_BT1D, sin_BT1D)
        q, k, v = qk[:, :, :H], qk[:, :, H:], qkv[:, :, H + KV :]
        cache_k, cache_v = pool.k[i, slots], pool.v[i, slots]
        cache_k[rows_B1, :, pos_BT] = k
        cache_v[rows_B1, :, pos_BT] = v
        keys, values = (
            (k.transpose(1, 2), v.transpose(1, 2)) if fresh else (cache_k[:, :, :n_keys], cache_v[:, :, :n_keys])
        )
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=mask_B1TK, is_causal=fresh, scale=D**-0.5, enable_gqa=H != KV
        )
        x = x + F.linear(attn.transpose(1, 2).reshape(B, T, H * D), lw.o_proj[i])
        gate, up = F.linear(rms_norm(x, lw.post_norm[i], w.eps), lw.gate_up_proj[i]).split(w.intermediate, dim=-1)
        x = x + F.linear(F.silu(gate) * up, lw.down_proj[i])
    x_last = x[:, 0] if T == 1 else x[rows_B1[:, 0], last_B]
    return F.linear(rms_norm(x_last, w.final_norm, w.eps), w.lm_head).float()


def attend(
    q_BKGD: Tensor, past_k_BKND: Tensor, past_v_BKND: Tensor, past_len_B: Tensor, k_BK1D: Tensor, v_BK1D: Tensor
) -> Tensor:
    """One query per row over its first past_len_B[b] cached keys (of N; later ones masked) and its own new key, G
    query heads per kv head — the decode kernel's contract (`kernels.py`) in torch, for a machine without the kernel:

        softmax([q·K_past / sqrt(D) + bias, q·k_new / sqrt(D)]) @ [V_past; v_new]    → [B, kv_heads, G, D]

    with bias 0 at positions < past_len_B[b] and -inf after. Reads every row up to N, where the kernel stops at each
    row's own length.
    """
    n_past = past_k_BKND.shape[2]
    future_BN = torch.arange(n_past, device=past_len_B.device)[None, :] >= past_len_B[:, None]
    bias_B11N = additive_mask(future_BN, q_BKGD.dtype)[:, None, None, :]
    scores = torch.cat(
        (
            torch.matmul(q_BKGD, past_k_BKND.transpose(-1, -2)) + bias_B11N,
            torch.matmul(q_BKGD, k_BK1D.transpose(-1, -2)),
        ),
        dim=-1,
    )
    probs = torch.softmax(scores * q_BKGD.shape[-1] ** -0.5, dim=-1)
    return torch.matmul(probs[..., :n_past], past_v_BKND) + probs[..., n_past:] * v_BK1D


def decode_step(
    w: ModelWeights,
    k_cache: Tensor,
    v_cache: Tensor,
    first_slot: int,
    n_past: int,
    tokens_B: Tensor,
    pos_B: Tensor,
    attention: DecodeAttention | None = None,
    threads: int = 1,
) -> tuple[Tensor, Tensor, Tensor]:
    """One new token per row (row b → KV slot first_slot + b, at position pos_B[b]), the decode half of `forward`.
    Row b attends to its first pos_B[b] cached positions (of the first `n_past` > max(pos_B) it is given) and to its
    own new key, through `attention` — the C++ kernel (`kernels.decode_attention_op`), which reads each row only up to
    its own length, on `threads` threads — or, when None, `attend` in torch. The whole caches come in (a view of the
    rows' slots would have strides equal to a contiguous tensor's whenever the batch fills the pool, and a compiled
    step guards on that coincidence).

    Pure — it reads the cache and writes nothing — so `torch.compile` can fuse it whole (`decode` stores the new
    keys/values afterwards).

    Returns fp32 logits [B, V] and the new keys and values, [layers, B * kv_heads, head_dim] each (row b * kv_heads + h
    is head h of row b).
    """
    B = tokens_B.shape[0]
    H, KV, D = w.n_heads, w.n_kv_heads, w.head_dim
    cos_B1D = w.cos_PD[pos_B][:, None]
    sin_B1D = w.signed_sin_PD[pos_B][:, None]
    new_k, new_v = [], []
    x = F.embedding(tokens_B, w.embed)
    lw = w.layers
    rows = slice(first_slot, first_slot + B)
    for i in range(w.n_layers):
        qkv = F.linear(rms_norm(x, lw.input_norm[i], w.eps), lw.qkv_proj[i]).view(B, H + 2 * KV, D)
        qk = apply_rope(rms_norm(qkv[:, : H + KV], lw.qk_norm[i], w.eps), cos_B1D, sin_B1D)
        q_BKGD = qk[:, :H].reshape(B, KV, H // KV, D)
        k_BK1D, v_BK1D = qk[:, H:, None], qkv[:, H + KV :, None]
        k_past, v_past = k_cache[i, rows, :, :n_past], v_cache[i, rows, :, :n_past]
        if attention is None:
            attn = attend(q_BKGD, k_past, v_past, pos_B, k_BK1D, v_BK1D)
        else:
            attn = attention(q_BKGD, k_past, v_past, pos_B, k_BK1D, v_BK1D, D**-0.5, threads)
        x = x + F.linear(attn.reshape(B, H * D), lw.o_proj[i])
        gate, up = F.linear(rms_norm(x, lw.post_norm[i], w.eps), lw.gate_up_proj[i]).split(w.intermediate, dim=-1)
        x = x + F.linear(F.silu(gate) * up, lw.down_proj[i])
        new_k.append(k_BK1D[:, :, 0])
        new_v.append(v_BK1D[:, :, 0])
    logits_BV = F.linear(rms_norm(x, w.final_norm, w.eps), w.lm_head).float()
    return logits_BV, torch.stack(new_k).view(w.n_layers, B * KV, D), torch.stack(new_v).view(w.n_layers, B * KV, D)


DecodeStep = Callable[
    [ModelWeights, Tensor, Tensor, int, int, Tensor, Tensor, DecodeAttention | None, int],
    tuple[Tensor, Tensor, Tensor],
]


@functools.cache
def compiled_decode_step() -> DecodeStep:
    """`decode_step` through `torch.compile`, made once per process so every engine shares its compiled graphs.

    Inductor fuses the step's ~30 small element-wise ops per layer into a few C++ kernels and, with its C++ wrapper,
    calls them and the matmuls without Python in between — on a tiny model the step is per-op overhead, not FLOPs.
    Shapes are dynamic (batch, past length, cache capacity), so batch 1 and batch > 1 are the two compilations (a past
    length of 1, from a one-token prompt, adds a third); weights are graph inputs, so new weights never recompile. The
    model's own sizes (hidden, heads, head_dim, vocabulary) are static — `ModelWeights.from_hf` and `KVPool` mark them
    — so inductor emits fixed-width loops for them (a batch-64 step 2.45 → 2.09 ms); another model shape compiles anew.

    Duck sizing is off while tracing: by default sizes that happen to be equal when a graph is traced (batch == KV
    slots, vocabulary == RoPE table length) become one symbol, and the graph recompiles (~10 s) the first time they
    differ. The flag is read only when a trace starts; setting it around each call costs ~3 µs.
    """
    compiled = torch.compile(decode_step, dynamic=True, fullgraph=True, options={"cpp_wrapper": True})

    def step(*args: Any) -> tuple[Tensor, Tensor, Tensor]:
        duck = fx_config.use_duck_shape
        fx_config.use_duck_shape = False
        try:
            return compiled(*args)
        finally:
            fx_config.use_duck_shape = duck

    return step


@torch.inference_mode()
def decode(
    w: ModelWeights,
    pool: KVPool,
    first_slot: int,
    tokens_B: Tensor,
    pos_B: Tensor,
    step: DecodeStep = decode_step,
    attention_threads: int = 1,
) -> Tensor:
    """`forward` for one token per row: run `step` (`decode_step` or a compiled copy) over the rows' slots, with the
    decode kernel when it is built (on `attention_threads` threads), store its keys and values at (slot, pos_B) and
    return fp32 logits [B, V]."""
    B, KV = tokens_B.shape[0], w.n_kv_heads
    attention = decode_attention_op() if pool.k.device.type == "cpu" else None  # the kernel is CPU code
    longest = int(pos_B.max())
    pool.ensure_capacity(longest + 1)
    # The kernel stops at each row's own length, so it gets the whole capacity; `attend` reads up to the longest row.
    n_past = pool.capacity if attention is not None else longest
    logits_BV, k_LND, v_LND = step(w, pool.k, pool.v, first_slot, n_past, tokens_B, pos_B, attention, attention_threads)
    # One index_copy_ per cache over its [layers, slots * kv_heads * capacity, head_dim] view: the row of (slot s,
    # head h, position p) is (s * kv_heads + h) * capacity + p.
    heads_BK = first_slot * KV + torch.arange(B * KV, device=pos_B.device).view(B, KV)
    rows_N = (heads_BK * pool.capacity + pos_B[:, None]).view(-1)
    L, S, _, C, D = pool.k.shape
    pool.k.view(L, S * KV * C, D).index_copy_(1, rows_N, k_LND)
    pool.v.view(L, S * KV * C, D).index_copy_(1, rows_N, v_LND)
    return logits_BV
