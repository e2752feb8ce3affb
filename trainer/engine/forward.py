"""A lean Qwen3 forward pass in pure torch over a slot-based KV cache, for batched prefill and decode.

It reads the weights of a transformers `Qwen3ForCausalLM` by reference (no copy), so an in-place weight update of
that model (`load_state_dict`) is seen at the next step. One layer, as in transformers' `modeling_qwen3.py`:

    h   = x + o_proj(attn(rope(q_norm(q_proj(rms(x)))), rope(k_norm(k_proj(rms(x)))), v_proj(rms(x))))
    out = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))

with rms(x) = w * x / sqrt(mean(x^2) + eps) (computed in fp32), q/k-norm an RMSNorm over each head's head_dim,
RoPE rotate-half with inv_freq from the model's rotary embedding, grouped-query attention (kv heads shared by
heads / kv_heads query heads) scaled by head_dim^-0.5, and logits = lm_head(rms(x_last)).

Batched layout: row b holds `T` new tokens of one sequence at positions start_b .. start_b + T - 1 (rows shorter
than T are right-padded; their padded positions are written to the cache but never attended to, because a query at
position p only sees keys at positions <= p and a later real token overwrites the padded slot before it is read).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import Qwen3ForCausalLM


@dataclass(frozen=True)
class LayerWeights:
    """References to one decoder layer's weights (nn.Linear weights are [out, in])."""

    input_norm: Tensor
    q_proj: Tensor
    k_proj: Tensor
    v_proj: Tensor
    o_proj: Tensor
    q_norm: Tensor
    k_norm: Tensor
    post_norm: Tensor
    gate_proj: Tensor
    up_proj: Tensor
    down_proj: Tensor


@dataclass(frozen=True)
class ModelWeights:
    """References to a Qwen3ForCausalLM's weights plus the shapes the forward needs."""

    embed: Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: Tensor
    lm_head: Tensor
    inv_freq: Tensor
    rope_scaling: float
    eps: float
    n_heads: int
    n_kv_heads: int
    head_dim: int

    @classmethod
    def from_hf(cls, model: Qwen3ForCausalLM) -> ModelWeights:
        cfg = model.config
        if cfg.model_type != "qwen3":
            raise ValueError(f"the engine runs Qwen3 models, got model_type={cfg.model_type!r}")
        if any(getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers):
            raise ValueError("sliding-window attention layers are not supported by the local engine")
        layers = tuple(
            LayerWeights(
                input_norm=layer.input_layernorm.weight,
                q_proj=layer.self_attn.q_proj.weight,
                k_proj=layer.self_attn.k_proj.weight,
                v_proj=layer.self_attn.v_proj.weight,
                o_proj=layer.self_attn.o_proj.weight,
                q_norm=layer.self_attn.q_norm.weight,
                k_norm=layer.self_attn.k_norm.weight,
                post_norm=layer.post_attention_layernorm.weight,
                gate_proj=layer.mlp.gate_proj.weight,
                up_proj=layer.mlp.up_proj.weight,
                down_proj=layer.mlp.down_proj.weight,
            )
            for layer in model.model.layers
        )
        return cls(
            embed=model.model.embed_tokens.weight,
            layers=layers,
            final_norm=model.model.norm.weight,
            lm_head=model.lm_head.weight,
            inv_freq=model.model.rotary_emb.inv_freq,
            rope_scaling=float(model.model.rotary_emb.attention_scaling),
            eps=float(cfg.rms_norm_eps),
            n_heads=cfg.num_attention_heads,
            n_kv_heads=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
        )


class KVPool:
    """Keys and values for `n_slots` sequences: [layers, slots, kv_heads, capacity, head_dim] each.

    Capacity grows by doubling (copying the live prefix) so memory follows the longest live sequence rather than
    the model's maximum context.
    """

    def __init__(self, weights: ModelWeights, n_slots: int, initial_capacity: int = 256) -> None:
        shape = (len(weights.layers), n_slots, weights.n_kv_heads, initial_capacity, weights.head_dim)
        self.k = torch.zeros(shape, dtype=weights.embed.dtype, device=weights.embed.device)
        self.v = torch.zeros_like(self.k)
        self._free = list(range(n_slots - 1, -1, -1))

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @property
    def n_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise RuntimeError("KV pool has no free slot")
        return self._free.pop()

    def release(self, slot: int) -> None:
        self._free.append(slot)

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
        self.k, self.v = grown_k, grown_v


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """w * x / sqrt(mean(x^2, last axis) + eps), in fp32 like transformers' Qwen3RMSNorm."""
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def apply_rope(x_BTHD: Tensor, cos_BTD: Tensor, sin_BTD: Tensor) -> Tensor:
    """x*cos + rotate_half(x)*sin, rotate_half([a, b]) = [-b, a] over the two halves of head_dim."""
    half = x_BTHD.shape[-1] // 2
    rotated = torch.cat((-x_BTHD[..., half:], x_BTHD[..., :half]), dim=-1)
    return x_BTHD * cos_BTD[:, :, None, :] + rotated * sin_BTD[:, :, None, :]


@torch.inference_mode()
def forward(
    w: ModelWeights, pool: KVPool, slots_B: Tensor, tokens_BT: Tensor, start_B: Tensor, last_B: Tensor
) -> Tensor:
    """Run `tokens_BT` through the model, append their keys/values to the slots' caches, return fp32 logits [B, V]
    at in-row index `last_B` (the last real token of each row)."""
    B, T = tokens_BT.shape
    pos_BT = start_B[:, None] + torch.arange(T, device=tokens_BT.device)[None, :]
    n_keys = int(pos_BT.max()) + 1
    pool.ensure_capacity(n_keys)
    freqs_BTD = pos_BT[..., None].float() * w.inv_freq.float()
    emb_BTD = torch.cat((freqs_BTD, freqs_BTD), dim=-1)
    dtype = w.embed.dtype
    cos_BTD = (emb_BTD.cos() * w.rope_scaling).to(dtype)
    sin_BTD = (emb_BTD.sin() * w.rope_scaling).to(dtype)
    # Query at position p may read keys at positions <= p of its own sequence.
    mask_B1TK = (torch.arange(n_keys, device=tokens_BT.device)[None, None, :] <= pos_BT[:, :, None])[:, None]
    H, KV, D = w.n_heads, w.n_kv_heads, w.head_dim

    x = F.embedding(tokens_BT, w.embed)
    for i, lw in enumerate(w.layers):
        h = rms_norm(x, lw.input_norm, w.eps)
        q = apply_rope(rms_norm(F.linear(h, lw.q_proj).view(B, T, H, D), lw.q_norm, w.eps), cos_BTD, sin_BTD)
        k = apply_rope(rms_norm(F.linear(h, lw.k_proj).view(B, T, KV, D), lw.k_norm, w.eps), cos_BTD, sin_BTD)
        v = F.linear(h, lw.v_proj).view(B, T, KV, D)
        pool.k[i][slots_B[:, None], :, pos_BT] = k
        pool.v[i][slots_B[:, None], :, pos_BT] = v
        keys = pool.k[i][slots_B, :, :n_keys]
        values = pool.v[i][slots_B, :, :n_keys]
        attn = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=mask_B1TK, scale=D**-0.5, enable_gqa=H != KV
        )
        x = x + F.linear(attn.transpose(1, 2).reshape(B, T, H * D), lw.o_proj)
        h = rms_norm(x, lw.post_norm, w.eps)
        x = x + F.linear(F.silu(F.linear(h, lw.gate_proj)) * F.linear(h, lw.up_proj), lw.down_proj)
    x_last = x[torch.arange(B, device=x.device), last_B]
    return F.linear(rms_norm(x_last, w.final_norm, w.eps), w.lm_head).float()
