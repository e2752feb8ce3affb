"""Sizing arithmetic against RECIPE.md's numbers and hand-computed values."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from trainer.sizing import (
    ClusterLayout,
    ModelShape,
    ParameterCount,
    algorithmic_ceiling,
    cluster_plan,
    human_bytes,
    human_count,
    local_plan,
    node_split,
    systems_ceiling,
    train_parameters_per_gpu,
    trainer_idle_share,
)

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


# --- cluster scale ---------------------------------------------------------------------------------------------------
#
# deployments/model_configs/ holds the two cluster models' config.json, written from the published architectures
# (deployments/model_configs/README.md). Published: Qwen3.5-35B-A3B = the HF transformers Qwen3_5MoeTextConfig
# defaults (hidden 2048, 40 layers, 16 / 2 heads × 256, linear 16 key / 32 value heads × 128, 256 experts of 512,
# top-8, shared expert 512, vocab 248320, untied); Qwen3.5-397B-A17B = NVIDIA Megatron's MIMO config "matching the
# HF text_config" (hidden 4096, 60 layers, 32 / 2 heads × 256, linear 16 key / 64 value heads × 128, 512 experts of
# 1024, top-10, shared expert 1024). Assumed: Qwen3.6-35B-A3B has the Qwen3.5-35B-A3B text architecture (Megatron
# Bridge: "Qwen3.6 shares the same architecture"; model cards: 40 layers = 30 Gated DeltaNet + 10 full attention).
# Token ids, RoPE and the vision tower are left out: they do not change the sizing.

MODEL_CONFIGS = Path(__file__).resolve().parents[2] / "deployments" / "model_configs"
GIB = 2**30


def _config(name: str) -> dict:
    return json.loads((MODEL_CONFIGS / f"{name}.json").read_text())


def _recipe_layout(model: str) -> ClusterLayout:
    """RECIPE "Hero configuration": 35B — 10 vLLM engines × TP8 + 4 train nodes (TP8/EP8); 397B — 12 engines × TP8 +
    8 train nodes (TP4/PP4/CP2/EP16); H200 141 GiB, vLLM at 0.85, 256 sequences per engine (the profiles)."""
    common = {"engine_tensor_parallel": 8, "gpu_memory_bytes": 141 * GIB, "max_num_seqs": 256}
    if model == "35b":
        return ClusterLayout(inference_nodes=10, engines=10, train_nodes=4, tensor_parallel=8, expert_parallel=8,
                             **common)  # fmt: skip
    return ClusterLayout(inference_nodes=12, engines=12, train_nodes=8, tensor_parallel=4, pipeline_parallel=4,
                         context_parallel=2, expert_parallel=16, **common)  # fmt: skip


def test_published_configs_kv_per_token_and_linear_state() -> None:
    small = ModelShape.from_config(_config("qwen3.6-35b-a3b"))  # reads text_config
    assert (small.layers, small.full_attention_layers, small.kv_heads, small.head_dim) == (40, 10, 2, 256)
    assert small.kv_bytes_per_token(dtype_bytes=2) == 2 * 10 * 2 * 256 * 2 == 20 * 1024  # RECIPE: ≈ 20 KiB / token
    assert small.linear_state_bytes == 30 * 32 * 128 * 128 * 2  # 30 MiB per sequence
    big = ModelShape.from_config(_config("qwen3.5-397b-a17b"))
    assert big.kv_bytes_per_token(dtype_bytes=2) == 2 * 15 * 2 * 256 * 2 == 30 * 1024
    assert big.linear_state_bytes == 45 * 64 * 128 * 128 * 2
    # vLLM gives each GPU max(1, kv_heads // TP) heads: 2 heads at TP8 are replicated to 8.
    assert small.engine_kv_bytes_per_token(2, tensor_parallel=1) == small.engine_kv_bytes_per_token(2, 2) == 20_480
    assert small.engine_kv_bytes_per_token(2, tensor_parallel=8) == 2 * 10 * 8 * 256 * 2 == 81_920


def test_parameter_count_of_the_35b_by_part() -> None:
    # h 2048, V 248320, 10 full-attention and 30 Gated DeltaNet layers, all 40 MoE. The total equals the parameter
    # count of transformers' Qwen3_5MoeForCausalLM built from this config on the meta device.
    p = ParameterCount.from_config(_config("qwen3.6-35b-a3b"))
    assert p.embedding == p.lm_head == 248_320 * 2048 == 508_559_360  # untied
    # q (with output gate) + k + v + o + q/k norms
    assert p.attention == 10 * (2048 * 16 * 256 * 2 + 2 * 2048 * 2 * 256 + 16 * 256 * 2048 + 2 * 256) == 272_634_880
    # key dim 16·128 = 2048, value dim 32·128 = 4096: q,k,v,z + b,a + conv(4) + A_log,dt_bias + norm + out
    linear = 2048 * (2 * 2048 + 2 * 4096) + 2 * 2048 * 32 + (2 * 2048 + 4096) * 4 + 2 * 32 + 128 + 4096 * 2048
    assert linear == 33_718_464 and p.linear_attention == 30 * linear
    assert p.routed_experts == 40 * 256 * 3 * 2048 * 512 == 32_212_254_720
    assert p.shared_experts == 40 * (3 * 2048 * 512 + 2048) and p.routers == 40 * 2048 * 256
    assert p.dense_mlp == 0 and p.norms == 2 * 2048 * 40 + 2048
    assert p.total == 34_660_610_688  # ≈ 35B
    assert p.non_expert == 34_660_610_688 - 32_212_254_720


def test_parameter_count_of_the_397b() -> None:
    p = ParameterCount.from_config(_config("qwen3.5-397b-a17b"))
    assert p.routed_experts == 60 * 512 * 3 * 4096 * 1024 == 386_547_056_640
    assert p.total == 396_346_350_336  # ≈ 397B (transformers on the meta device agrees)


def test_parameter_count_of_dense_and_sparse_step_configs() -> None:
    tiny = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
            "hidden_size": 128, "intermediate_size": 384, "vocab_size": 1000, "tie_word_embeddings": True}  # fmt: skip
    p = ParameterCount.from_config(tiny)
    # tied embedding; per layer q 128·256 + k,v 2·128·128 + o 256·128 + norms 128, MLP 3·128·384; norms 2·128·4 + 128
    assert p.lm_head == 0 and p.attention == 4 * (32_768 + 32_768 + 32_768 + 128)
    assert p.total == 128_000 + 4 * 98_432 + 4 * 147_456 + 1_152 == 1_112_704  # = transformers' Qwen3ForCausalLM
    # Qwen3-MoE style: MoE on layers with (i + 1) % step == 0 unless mlp-only: of 6 layers, 1 and 5 (3 is mlp-only).
    sparse = tiny | {"num_hidden_layers": 6, "num_local_experts": 8, "moe_intermediate_size": 64,
                     "decoder_sparse_step": 2, "mlp_only_layers": [3]}  # fmt: skip
    p = ParameterCount.from_config(sparse)
    assert p.routed_experts == 2 * 8 * 3 * 128 * 64 and p.routers == 2 * 128 * 8
    assert p.dense_mlp == 4 * 3 * 128 * 384 and p.shared_experts == 0


def test_train_parameters_per_gpu() -> None:
    small = ParameterCount.from_config(_config("qwen3.6-35b-a3b"))
    # 35B, TP8 / EP8 / PP1: experts ÷ 8 + (decoder non-expert + embedding + LM head) ÷ 8
    decoder_rest = 34_660_610_688 - 32_212_254_720 - 2 * 508_559_360
    assert decoder_rest == small.layer_non_expert == 1_431_237_248
    expected = 32_212_254_720 // 8 + (1_431_237_248 + 2 * 508_559_360) // 8
    assert train_parameters_per_gpu(small, _recipe_layout("35b")) == expected == 4_332_576_336
    # 397B, TP4 / PP4 / EP16: experts ÷ 64 + (decoder non-expert ÷ 4 + the larger embedding) ÷ 4
    big = ParameterCount.from_config(_config("qwen3.5-397b-a17b"))
    decoder_rest = 396_346_350_336 - 386_547_056_640 - 2 * 248_320 * 4096
    expected = 386_547_056_640 // 64 + (decoder_rest // 4 + 248_320 * 4096) // 4
    assert train_parameters_per_gpu(big, _recipe_layout("397b")) == expected == 6_779_393_456


def test_recipe_cluster_plans_fit() -> None:
    budget = int(141 * GIB * 0.85) * 8  # one TP8 engine at gpu_memory_utilization 0.85
    small = cluster_plan(_config("qwen3.6-35b-a3b"), _recipe_layout("35b"), trajectory_tokens=160_000,
                         max_staleness=3, prompts_per_step=16, samples_per_prompt=16)  # fmt: skip
    assert small.train_bytes_per_gpu == 4_332_576_336 * 18 < 141 * GIB  # 72.6 GiB of weights, grads and Adam
    assert small.engine_weights_bytes == 34_660_610_688 * 2 and small.engine_budget_bytes == budget
    kv_cache = budget - 34_660_610_688 * 2
    assert small.kv_capacity_tokens == kv_cache // 81_920
    # a 160k-token trajectory: 160000 · 80 KiB of replicated KV + 30 MiB of linear state → 73 per engine
    assert small.trajectories_per_engine == kv_cache // (160_000 * 81_920 + 31_457_280) == 73
    assert (small.systems_ceiling, small.algorithmic_ceiling, small.concurrency) == (730, 1024, 730)
    assert small.fits_train and small.fits_engine and small.fits and small.problems == ()

    big = cluster_plan(_config("qwen3.5-397b-a17b"), _recipe_layout("397b"), trajectory_tokens=160_000,
                       max_staleness=3, prompts_per_step=16, samples_per_prompt=16)  # fmt: skip
    assert big.train_bytes_per_gpu == 6_779_393_456 * 18 < 141 * GIB  # 113.6 GiB
    assert big.engine_weights_bytes_per_gpu == 396_346_350_336 * 2 // 8  # 92.3 GiB per engine GPU
    kv_cache = budget - 396_346_350_336 * 2
    assert big.trajectories_per_engine == kv_cache // (160_000 * 122_880 + 94_371_840) == 11
    assert (big.systems_ceiling, big.concurrency) == (132, 132) and big.fits
    # the profile's max_concurrency 300 = 25 per engine fits while trajectories average ≤ 76k tokens
    assert big.trajectory_tokens_at(300) == (kv_cache // 25 - 94_371_840) // 122_880 == 76_318


def test_plans_that_do_not_fit() -> None:
    config = _config("qwen3.5-397b-a17b")
    knobs = {"trajectory_tokens": 160_000, "max_staleness": 3, "prompts_per_step": 16, "samples_per_prompt": 16}
    # one train node: the experts alone are 386.5e9 ÷ 8 params per GPU
    one_node = ClusterLayout(inference_nodes=12, engines=12, engine_tensor_parallel=8, train_nodes=1,
                             tensor_parallel=8, expert_parallel=8)  # fmt: skip
    crowded = cluster_plan(config, one_node, **knobs)
    assert not crowded.fits_train and crowded.fits_engine and not crowded.fits
    # TP4 engines: 738 GiB of weights for 4 × 119.9 GiB — no KV room
    small_engines = cluster_plan(config, replace(_recipe_layout("397b"), engine_tensor_parallel=4), **knobs)
    assert small_engines.kv_capacity_bytes == 0 and not small_engines.fits_engine and not small_engines.fits
    assert small_engines.systems_ceiling == small_engines.concurrency == 0


def test_layout_problems() -> None:
    layout = replace(_recipe_layout("397b"), train_nodes=2, engines=13)
    assert layout.problems(layers=60, experts=512) == [
        "13 engines × TP8 need 104 GPUs; 12 inference nodes have 96",
        "16 train GPUs are not a multiple of TP·PP·CP = 32",
        "16 train GPUs are not a multiple of EP·PP = 64",
    ]
    assert replace(_recipe_layout("35b"), expert_parallel=3).problems(40, 256)[-1] == (
        "256 experts do not split evenly over EP3"
    )
    assert _recipe_layout("397b").problems(layers=62, experts=512) == ["62 layers do not split evenly over PP4"]
    with pytest.raises(ValueError, match="engines must be at least 1"):
        replace(_recipe_layout("35b"), engines=0)


def test_node_split_keeps_the_trainer_busy() -> None:
    # I = ⌈N·t / (g + t)⌉: generation 0.5 and training 1.5 trajectories/s per node → 16 nodes split 12:4 (RECIPE 35B)
    split = node_split(16, generation_per_node=0.5, train_per_node=1.5)
    assert (split.inference_nodes, split.train_nodes) == (12, 4) and split.trainer_idle_share == 0.0
    assert node_split(20, 1.0, 1.5).inference_nodes == 12  # 20·1.5/2.5 = 12 → 12:8 (RECIPE 397B)
    assert node_split(10, 1.0, 1.0).inference_nodes == 5  # balanced rates: half and half
    assert node_split(10, 1.0, 1.1).inference_nodes == 6  # 10·1.1/2.1 = 5.24 → round up, never starve the trainer
    # a 10:6 split of the same 16 nodes: generators 5/s for a trainer that could take 9/s → idle 1 − 5/9
    assert trainer_idle_share(10, 6, 0.5, 1.5) == pytest.approx(4 / 9)
    assert trainer_idle_share(14, 2, 0.5, 1.5) == 0.0  # over-provisioned generation: the engines wait instead
    assert node_split(4, 0.1, 10.0, min_train_nodes=2).train_nodes == 2
    with pytest.raises(ValueError):
        node_split(1, 1.0, 1.0)
    with pytest.raises(ValueError):
        node_split(8, 0.0, 1.0)


def test_rows_and_human_units() -> None:
    assert (human_bytes(512), human_bytes(20_480), human_bytes(3 * GIB)) == ("512 B", "20.0 KiB", "3.0 GiB")
    assert human_count(34_660_610_688) == "34.66 billion"
    plan = cluster_plan(_config("qwen3.6-35b-a3b"), _recipe_layout("35b"), trajectory_tokens=160_000,
                        max_staleness=3, prompts_per_step=16, samples_per_prompt=16)  # fmt: skip
    rows = {quantity.strip(): value for quantity, value, _ in plan.rows()}
    assert rows["KV per token"] == "20.0 KiB" and rows["concurrency"] == "730" and rows["train fits"] == "yes"
    assert rows["train memory per GPU"] == "72.6 GiB of 141.0 GiB"
