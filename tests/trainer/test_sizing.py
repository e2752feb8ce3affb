"""Sizing arithmetic against RECIPE.md's numbers and hand-computed values."""

import pytest

from trainer.sizing import ModelShape, algorithmic_ceiling, local_plan, systems_ceiling

# RECIPE "Fully-async RL": Qwen3.5/3.6-35B-A3B has 10 full-attention layers of 40 (a full-attention layer every 4th,
# the rest Gated DeltaNet), 2 KV heads × head_dim 256.
HYBRID_35B = {
    "num_hidden_layers": 40,
    "full_attention_interval": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "hidden_size": 2048,
    "vocab_size": 248320,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
}


def test_hybrid_kv_bytes_count_only_full_attention_layers() -> None:
    shape = ModelShape.from_config(HYBRID_35B)
    assert shape.full_attention_layers == 10
    assert shape.kv_bytes_per_token(dtype_bytes=2) == 2 * 10 * 2 * 256 * 2 == 20_480  # ≈ 20 KiB / token in bf16
    # 30 linear layers × 32 value heads × (128 × 128) state × 2 bytes, once per sequence.
    assert shape.linear_state_bytes == 30 * 32 * 128 * 128 * 2


def test_explicit_layer_types_win() -> None:
    config = HYBRID_35B | {"layer_types": ["full_attention", "linear_attention"] * 20}
    assert ModelShape.from_config(config).full_attention_layers == 20


def test_ceilings() -> None:
    assert algorithmic_ceiling(max_staleness=3, prompts_per_step=16, samples_per_prompt=16) == 1024
    assert systems_ceiling(kv_capacity_tokens=1_000_000, trajectory_tokens=30_000) == 33
    with pytest.raises(ValueError):
        systems_ceiling(10, 0)


def test_local_plan_of_a_tiny_qwen3() -> None:
    config = {"num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
              "hidden_size": 128, "vocab_size": 1000}  # fmt: skip
    plan = local_plan(
        ModelShape.from_config(config), 1_000_000, max_num_seqs=64, max_model_len=1024, trajectory_tokens=300,
        max_staleness=1, prompts_per_step=8, samples_per_prompt=8,
    )  # fmt: skip
    assert plan.kv_bytes_per_token == 2 * 4 * 1 * 64 * 4 == 2048
    assert plan.kv_cache_bytes == 64 * 1024 * 2048
    assert plan.trainer_bytes == 16_000_000 and plan.engine_weights_bytes == 4_000_000
    assert plan.systems_ceiling == 64 and plan.algorithmic_ceiling == 128 and plan.concurrency == 64
    assert plan.fits(plan.total_bytes) and not plan.fits(plan.total_bytes - 1)
