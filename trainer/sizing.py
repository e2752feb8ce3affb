"""Sizing: how many trajectories can be in flight, and whether a run fits in memory (RECIPE "Fully-async RL").

Pure arithmetic over a Hugging Face ``config.json`` and the run's knobs; no GPU, no torch.

* KV bytes per token = 2 · (full-attention layers) · kv_heads · head_dim · dtype bytes. Hybrid models (Gated
  DeltaNet: Qwen3.5 / Qwen3.6) only grow a KV cache on their full-attention layers; their linear-attention layers
  hold a fixed state per sequence (``linear_state_bytes``), counted once per sequence in flight.
* systems ceiling = KV capacity (tokens) ÷ trajectory length; algorithmic ceiling = (S + 1) · B · n;
  concurrency = min of the two.
* memory of the local profile: the trainer's weights + gradients + AdamW moments (fp32: 16 bytes per parameter),
  the engine's copy of the weights, and its KV cache of ``max_num_seqs × max_model_len`` tokens.

    shape = ModelShape.from_config(json.loads(Path("models/base/x/config.json").read_text()))
    shape.kv_bytes_per_token(dtype_bytes=2)
    algorithmic_ceiling(max_staleness=3, prompts_per_step=16, samples_per_prompt=16)   # 1024
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FP32_BYTES = 4
ADAMW_TRAIN_BYTES_PER_PARAM = 16
"""fp32 weights (4) + gradients (4) + AdamW first and second moments (8)."""


@dataclass(frozen=True)
class ModelShape:
    """The parts of an architecture that decide memory: layers by kind, attention geometry, parameters."""

    layers: int
    full_attention_layers: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    linear_state_bytes: int = 0
    """Recurrent state per sequence over all linear-attention layers (bf16), 0 for a pure transformer."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelShape:
        """From a HF ``config.json`` (Qwen3; hybrid configs list ``layer_types`` with "full_attention" entries)."""
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
        layer_types = config.get("layer_types")
        if not layer_types and config.get("full_attention_interval"):  # Qwen3-Next style: every k-th layer
            interval = int(config["full_attention_interval"])
            layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
        full = sum(kind == "full_attention" for kind in layer_types) if layer_types else layers
        linear_state = 0
        if layer_types and full < layers:
            k_heads = int(config.get("linear_num_key_heads", 0))
            v_heads = int(config.get("linear_num_value_heads", k_heads))
            k_dim = int(config.get("linear_key_head_dim", 0))
            v_dim = int(config.get("linear_value_head_dim", 0))
            # Gated DeltaNet keeps a (k_dim × v_dim) matrix per value head per layer, in bf16.
            linear_state = (layers - full) * max(k_heads, v_heads) * k_dim * v_dim * 2
        return cls(
            layers=layers,
            full_attention_layers=full,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            head_dim=head_dim,
            hidden=int(config["hidden_size"]),
            vocab=int(config["vocab_size"]),
            linear_state_bytes=linear_state,
        )

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """2 (K and V) · full-attention layers · kv_heads · head_dim · dtype bytes."""
        return 2 * self.full_attention_layers * self.kv_heads * self.head_dim * dtype_bytes


def algorithmic_ceiling(max_staleness: int, prompts_per_step: int, samples_per_prompt: int) -> int:
    """(S + 1) · B · n: trajectories the staleness bound lets be in flight (RECIPE: (3+1)·16·16 = 1024)."""
    return (max_staleness + 1) * prompts_per_step * samples_per_prompt


def systems_ceiling(kv_capacity_tokens: int, trajectory_tokens: int) -> int:
    """KV capacity ÷ trajectory length: trajectories whose whole context fits the engines' caches at once."""
    if trajectory_tokens < 1:
        raise ValueError(f"trajectory length must be at least 1 token, got {trajectory_tokens}")
    return kv_capacity_tokens // trajectory_tokens


@dataclass(frozen=True)
class LocalPlan:
    """Memory of one machine running the local trainer and engine; bytes throughout."""

    parameters: int
    trainer_bytes: int
    engine_weights_bytes: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    systems_ceiling: int
    algorithmic_ceiling: int

    @property
    def total_bytes(self) -> int:
        return self.trainer_bytes + self.engine_weights_bytes + self.kv_cache_bytes

    @property
    def concurrency(self) -> int:
        return min(self.systems_ceiling, self.algorithmic_ceiling)

    def fits(self, budget_bytes: float) -> bool:
        return self.total_bytes <= budget_bytes


def local_plan(
    shape: ModelShape,
    parameters: int,
    *,
    max_num_seqs: int,
    max_model_len: int,
    trajectory_tokens: int,
    max_staleness: int,
    prompts_per_step: int,
    samples_per_prompt: int,
    dtype_bytes: int = FP32_BYTES,
) -> LocalPlan:
    """The local profile's plan: fp32 trainer (AdamW) + engine copy + KV cache of every slot at full length."""
    per_token = shape.kv_bytes_per_token(dtype_bytes)
    capacity_tokens = max_num_seqs * max_model_len
    return LocalPlan(
        parameters=parameters,
        trainer_bytes=parameters * ADAMW_TRAIN_BYTES_PER_PARAM,
        engine_weights_bytes=parameters * dtype_bytes,
        kv_bytes_per_token=per_token,
        kv_cache_bytes=capacity_tokens * per_token + max_num_seqs * shape.linear_state_bytes,
        systems_ceiling=min(max_num_seqs, systems_ceiling(capacity_tokens, trajectory_tokens)),
        algorithmic_ceiling=algorithmic_ceiling(max_staleness, prompts_per_step, samples_per_prompt),
    )
