"""Sizing: how many trajectories can be in flight, and whether a run fits in memory (RECIPE "Fully-async RL").

Pure arithmetic over a Hugging Face ``config.json`` and the run's knobs; no GPU, no torch.

* KV bytes per token = 2 · (full-attention layers) · kv_heads · head_dim · dtype bytes. Hybrid models (Gated
  DeltaNet: Qwen3.5 / Qwen3.6) only grow a KV cache on their full-attention layers; their linear-attention layers
  hold a fixed state per sequence (``linear_state_bytes``), counted once per sequence in flight.
* systems ceiling = KV capacity (tokens) ÷ trajectory length; algorithmic ceiling = (S + 1) · B · n;
  concurrency = min of the two.
* memory of the local profile: the trainer's weights + gradients + AdamW moments (fp32: 16 bytes per parameter),
  the engine's copy of the weights, and its KV cache of ``max_num_seqs × max_model_len`` tokens.
* a cluster profile (``cluster_plan``): parameters estimated from the architecture (``ParameterCount``), Megatron
  weights + optimizer state per train GPU under TP / EP / PP, vLLM weights per engine and the KV capacity the rest of
  its memory holds, and the inference:train node split that keeps the trainer from waiting (``node_split``).

    shape = ModelShape.from_config(json.loads(Path("models/base/x/config.json").read_text()))
    shape.kv_bytes_per_token(dtype_bytes=2)
    algorithmic_ceiling(max_staleness=3, prompts_per_step=16, samples_per_prompt=16)   # 1024
    plan = cluster_plan(config, layout, trajectory_tokens=160_000, max_staleness=3, prompts_per_step=16,
                        samples_per_prompt=16)
    plan.fits, plan.concurrency, plan.rows()
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FP32_BYTES = 4
BF16_BYTES = 2
GIB = 2**30
ADAMW_TRAIN_BYTES_PER_PARAM = 16
"""fp32 weights (4) + gradients (4) + AdamW first and second moments (8)."""
MIXED_PRECISION_TRAIN_BYTES_PER_PARAM = 18
"""Megatron bf16 training with Adam: bf16 weights (2) + fp32 main gradients (4) + fp32 master weights (4) + Adam
first and second moments (8) — not sharded by the distributed optimizer, so an upper bound per GPU."""
OUTPUT_GATED_MODEL_TYPES = ("qwen3_next", "qwen3_5")
"""``model_type`` prefixes whose full attention has a sigmoid output gate (``q_proj`` is twice as wide)."""


def text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config: ``text_config`` of a multimodal one (Qwen3.5 / 3.6), else itself."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def layer_kinds(config: Mapping[str, Any]) -> list[str]:
    """Per layer "full_attention" or "linear_attention": ``layer_types`` if given, else every
    ``full_attention_interval``-th layer is full attention (Qwen3-Next style), else all full attention."""
    config = text_config(config)
    layers = int(config["num_hidden_layers"])
    kinds = config.get("layer_types")
    if kinds:
        return [str(kind) for kind in kinds]
    if config.get("full_attention_interval"):
        interval = int(config["full_attention_interval"])
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    return ["full_attention"] * layers


def routed_experts(config: Mapping[str, Any]) -> int:
    """Routed experts per MoE layer (``num_experts``, Mixtral's ``num_local_experts``), 0 for a dense model."""
    config = text_config(config)
    return int(config.get("num_experts") or config.get("num_local_experts") or 0)


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
        """From a HF ``config.json`` (Qwen3; hybrid configs list ``layer_types`` with "full_attention" entries;
        a multimodal config's ``text_config`` is read)."""
        config = text_config(config)
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
        kinds = layer_kinds(config)
        full = sum(kind == "full_attention" for kind in kinds)
        linear_state = 0
        if full < layers:
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

    def engine_kv_bytes_per_token(self, dtype_bytes: int, tensor_parallel: int) -> int:
        """KV bytes per token over a whole tensor-parallel engine: vLLM gives each GPU ``max(1, kv_heads // TP)``
        heads, so with TP > kv_heads the heads are replicated and the engine stores 2 · full layers · head_dim ·
        dtype bytes · TP · max(1, kv_heads // TP) — e.g. 4 × the model's bytes for 2 KV heads at TP 8."""
        heads = max(1, self.kv_heads // tensor_parallel) * tensor_parallel
        return 2 * self.full_attention_layers * heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a Qwen-family decoder, by part, estimated from its ``config.json`` (the vision tower and
    multi-token-prediction heads of Qwen3.5 / 3.6 are not counted: a few % of the total).

    With h = hidden_size, V = vocab_size, H / K = attention / KV heads of head_dim d, g = 2 when the attention has
    an output gate (Qwen3-Next, Qwen3.5: ``q_proj`` emits the gate too) else 1; linear attention (Gated DeltaNet)
    with Kh key heads of dk and Vh value heads of dv (k = Kh·dk, v = Vh·dv) and a causal conv of width c; E routed
    experts of width m, a shared expert of width s, a dense MLP of width f:

    * embeddings: V·h (input) + V·h (LM head, unless ``tie_word_embeddings``)
    * full-attention layer: h·H·d·g (q) + 2·h·K·d (k, v) + H·d·h (o) + 2·d (q/k RMSNorm)
    * linear-attention layer: h·(2k + 2v) (q, k, v, z) + 2·h·Vh (b, a) + (2k + v)·c (depthwise conv)
      + 2·Vh (A_log, dt_bias) + dv (gated RMSNorm) + v·h (out)
    * MoE layer: E·3·h·m (routed SwiGLU experts) + h·E (router) + 3·h·s + h (shared expert and its gate, s > 0);
      a layer is MoE when E > 0, it is not in ``mlp_only_layers`` and (i + 1) % ``decoder_sparse_step`` == 0
    * dense MLP layer: 3·h·f
    * norms: 2·h per layer + h (final)

    Source: the module shapes of HF transformers' Qwen3, Qwen3-MoE, Qwen3-Next and Qwen3.5-MoE models; equal to the
    count of those models built on the meta device (Qwen3.5/3.6-35B-A3B: 34.66 B, Qwen3.5-397B-A17B: 396.35 B).
    The Qwen3.6-35B-A3B config in deployments/model_configs is assumed to be Qwen3.5-35B-A3B's architecture (see
    the README there).
    """

    embedding: int
    lm_head: int
    attention: int
    linear_attention: int
    routed_experts: int
    shared_experts: int
    routers: int
    dense_mlp: int
    norms: int

    @property
    def total(self) -> int:
        return (
            self.embedding + self.lm_head + self.attention + self.linear_attention + self.routed_experts
            + self.shared_experts + self.routers + self.dense_mlp + self.norms
        )  # fmt: skip

    @property
    def non_expert(self) -> int:
        """Everything but the routed experts (what Megatron shards over TP rather than EP)."""
        return self.total - self.routed_experts

    @property
    def layer_non_expert(self) -> int:
        """Non-expert parameters inside the decoder layers (split over pipeline stages)."""
        return self.non_expert - self.embedding - self.lm_head

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ParameterCount:
        c = text_config(config)
        h, vocab = int(c["hidden_size"]), int(c["vocab_size"])
        heads = int(c["num_attention_heads"])
        kv_heads = int(c.get("num_key_value_heads", heads))
        d = int(c.get("head_dim") or h // heads)
        gate = 2 if str(c.get("model_type", "")).startswith(OUTPUT_GATED_MODEL_TYPES) else 1
        full_layer = h * heads * d * gate + 2 * h * kv_heads * d + heads * d * h + 2 * d
        k_heads = int(c.get("linear_num_key_heads", 0))
        v_heads = int(c.get("linear_num_value_heads", k_heads))
        dk, dv = int(c.get("linear_key_head_dim", 0)), int(c.get("linear_value_head_dim", 0))
        k, v = k_heads * dk, v_heads * dv
        conv = int(c.get("linear_conv_kernel_dim", 4))
        linear_layer = h * (2 * k + 2 * v) + 2 * h * v_heads + (2 * k + v) * conv + 2 * v_heads + dv + v * h
        experts = routed_experts(c)
        expert_width = int(c.get("moe_intermediate_size") or 0)
        shared_width = int(c.get("shared_expert_intermediate_size") or 0)
        sparse_step = int(c.get("decoder_sparse_step") or 1)
        mlp_only = set(c.get("mlp_only_layers") or ())
        kinds = layer_kinds(c)
        moe = [experts > 0 and i not in mlp_only and (i + 1) % sparse_step == 0 for i in range(len(kinds))]
        moe_layers, dense_layers = sum(moe), len(kinds) - sum(moe)
        dense_width = int(c.get("intermediate_size") or 0) if dense_layers else 0
        full = kinds.count("full_attention")
        tied = bool(config.get("tie_word_embeddings", c.get("tie_word_embeddings", False)))
        return cls(
            embedding=vocab * h,
            lm_head=0 if tied else vocab * h,
            attention=full * full_layer,
            linear_attention=(len(kinds) - full) * linear_layer,
            routed_experts=moe_layers * experts * 3 * h * expert_width,
            shared_experts=moe_layers * (3 * h * shared_width + h) if shared_width else 0,
            routers=moe_layers * h * experts,
            dense_mlp=dense_layers * 3 * h * dense_width,
            norms=2 * h * len(kinds) + h,
        )


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


# --- cluster scale ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterLayout:
    """Where a cluster profile's GPU work runs (RECIPE "Hero configuration"): vLLM engines on the inference nodes,
    Megatron on the train nodes. Memory in bytes."""

    inference_nodes: int
    engines: int
    engine_tensor_parallel: int
    train_nodes: int
    tensor_parallel: int = 1
    expert_parallel: int = 1
    pipeline_parallel: int = 1
    context_parallel: int = 1
    gpus_per_node: int = 8
    gpu_memory_bytes: int = 141 * GIB
    gpu_memory_utilization: float = 0.85
    """Share of each engine GPU vLLM may use for weights, activations and KV cache."""
    max_num_seqs: int | None = None
    """Sequences one engine decodes together (vLLM ``max_num_seqs``); None: only the KV cache limits them."""

    def __post_init__(self) -> None:
        counts = ("inference_nodes", "engines", "engine_tensor_parallel", "train_nodes", "tensor_parallel",
                  "expert_parallel", "pipeline_parallel", "context_parallel", "gpus_per_node")  # fmt: skip
        for name in counts:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.gpu_memory_bytes < 1 or (self.max_num_seqs is not None and self.max_num_seqs < 1):
            raise ValueError(
                f"gpu memory and max_num_seqs must be positive, got {self.gpu_memory_bytes}, {self.max_num_seqs}"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")

    @property
    def train_gpus(self) -> int:
        return self.train_nodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        """Megatron's data-parallel size: train GPUs ÷ (TP · PP · CP)."""
        return self.train_gpus // (self.tensor_parallel * self.pipeline_parallel * self.context_parallel)

    def problems(self, layers: int, experts: int) -> list[str]:
        """What makes the layout impossible to launch (empty when it is consistent)."""
        found = []
        engine_gpus = self.engines * self.engine_tensor_parallel
        if engine_gpus > self.inference_nodes * self.gpus_per_node:
            found.append(
                f"{self.engines} engines × TP{self.engine_tensor_parallel} need {engine_gpus} GPUs; "
                f"{self.inference_nodes} inference nodes have {self.inference_nodes * self.gpus_per_node}"
            )
        dense = self.tensor_parallel * self.pipeline_parallel * self.context_parallel
        if self.train_gpus % dense:
            found.append(f"{self.train_gpus} train GPUs are not a multiple of TP·PP·CP = {dense}")
        experts_pp = self.expert_parallel * self.pipeline_parallel
        if self.train_gpus % experts_pp:
            found.append(f"{self.train_gpus} train GPUs are not a multiple of EP·PP = {experts_pp}")
        if experts and experts % self.expert_parallel:
            found.append(f"{experts} experts do not split evenly over EP{self.expert_parallel}")
        if layers % self.pipeline_parallel:
            found.append(f"{layers} layers do not split evenly over PP{self.pipeline_parallel}")
        return found


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def train_parameters_per_gpu(parameters: ParameterCount, layout: ClusterLayout) -> int:
    """Parameters one Megatron GPU holds, on the heaviest pipeline stage:

    routed experts ÷ (EP · PP) + (decoder non-expert ÷ PP + embeddings on the stage) ÷ TP,

    the embeddings on the stage being input embedding + LM head with PP = 1, else the larger of the two (the first
    stage holds one, the last the other). Expert tensor parallelism is taken as 1 (each expert whole on one GPU);
    context parallelism splits activations, not weights.
    """
    pp = layout.pipeline_parallel
    experts = _ceil_div(parameters.routed_experts, layout.expert_parallel * pp)
    embeddings = parameters.embedding + parameters.lm_head if pp == 1 else max(parameters.embedding, parameters.lm_head)
    rest = _ceil_div(_ceil_div(parameters.layer_non_expert, pp) + embeddings, layout.tensor_parallel)
    return experts + rest


@dataclass(frozen=True)
class ClusterPlan:
    """A cluster profile's memory and concurrency; bytes and tokens throughout, per GPU or per engine as named."""

    layout: ClusterLayout
    parameters: ParameterCount
    shape: ModelShape
    trajectory_tokens: int
    max_staleness: int
    prompts_per_step: int
    samples_per_prompt: int
    weight_bytes: int = BF16_BYTES
    """Bytes per engine weight."""
    kv_dtype_bytes: int = BF16_BYTES
    train_bytes_per_param: int = MIXED_PRECISION_TRAIN_BYTES_PER_PARAM
    problems: tuple[str, ...] = ()

    @property
    def kv_bytes_per_token(self) -> int:
        """The model's: 2 · full-attention layers · kv_heads · head_dim · dtype bytes."""
        return self.shape.kv_bytes_per_token(self.kv_dtype_bytes)

    @property
    def engine_kv_bytes_per_token(self) -> int:
        """Over one engine, KV heads replicated up to its TP (``ModelShape.engine_kv_bytes_per_token``)."""
        return self.shape.engine_kv_bytes_per_token(self.kv_dtype_bytes, self.layout.engine_tensor_parallel)

    @property
    def train_parameters_per_gpu(self) -> int:
        return train_parameters_per_gpu(self.parameters, self.layout)

    @property
    def engine_weights_bytes(self) -> int:
        """Weights of one engine (all its GPUs together)."""
        return self.parameters.total * self.weight_bytes

    @property
    def engine_budget_bytes(self) -> int:
        """gpu_memory · gpu_memory_utilization · engine TP: what vLLM may use on one engine."""
        lay = self.layout
        return int(lay.gpu_memory_bytes * lay.gpu_memory_utilization) * lay.engine_tensor_parallel

    @property
    def trajectories_per_engine(self) -> int:
        """KV cache ÷ (trajectory tokens · engine KV bytes per token + linear state per sequence), at most
        ``max_num_seqs``."""
        per_trajectory = self.trajectory_tokens * self.engine_kv_bytes_per_token + self.shape.linear_state_bytes
        per_engine = self.kv_capacity_bytes // per_trajectory
        return per_engine if self.layout.max_num_seqs is None else min(per_engine, self.layout.max_num_seqs)

    @property
    def train_bytes_per_gpu(self) -> int:
        return self.train_parameters_per_gpu * self.train_bytes_per_param

    @property
    def engine_weights_bytes_per_gpu(self) -> int:
        return self.engine_weights_bytes // self.layout.engine_tensor_parallel

    @property
    def kv_capacity_bytes(self) -> int:
        """Per engine: gpu_memory · utilization · TP − the engine's weights (never negative)."""
        return max(0, self.engine_budget_bytes - self.engine_weights_bytes)

    @property
    def kv_capacity_tokens(self) -> int:
        """Per engine: KV capacity ÷ the engine's KV bytes per token."""
        return self.kv_capacity_bytes // self.engine_kv_bytes_per_token

    @property
    def systems_ceiling(self) -> int:
        """engines · trajectories per engine (a trajectory lives on one engine)."""
        return self.layout.engines * self.trajectories_per_engine

    @property
    def algorithmic_ceiling(self) -> int:
        return algorithmic_ceiling(self.max_staleness, self.prompts_per_step, self.samples_per_prompt)

    @property
    def concurrency(self) -> int:
        return min(self.systems_ceiling, self.algorithmic_ceiling)

    def trajectory_tokens_at(self, concurrency: int) -> int:
        """The longest average trajectory with which ``concurrency`` trajectories fit the engines' KV caches:
        (KV cache per engine ÷ ⌈concurrency ÷ engines⌉ − linear state) ÷ engine KV bytes per token."""
        per_engine = _ceil_div(concurrency, self.layout.engines)
        return (
            max(0, (self.kv_capacity_bytes // per_engine - self.shape.linear_state_bytes))
            // self.engine_kv_bytes_per_token
        )

    @property
    def fits_train(self) -> bool:
        """Weights + gradients + optimizer state of the heaviest train GPU within its memory."""
        return self.train_bytes_per_gpu <= self.layout.gpu_memory_bytes

    @property
    def fits_engine(self) -> bool:
        """The engine's weights leave KV room for at least one whole trajectory."""
        return self.trajectories_per_engine >= 1

    @property
    def fits(self) -> bool:
        return self.fits_train and self.fits_engine and not self.problems

    def rows(self) -> list[tuple[str, str, str]]:
        """(quantity, value, how it is computed) for a text table; human units (GiB, KiB, billions)."""
        lay, p, s = self.layout, self.parameters, self.shape
        linear = s.layers - s.full_attention_layers
        gpu = human_bytes(lay.gpu_memory_bytes)
        seqs = f", ≤ max_num_seqs {lay.max_num_seqs}" if lay.max_num_seqs else ""
        return [
            ("parameters", human_count(p.total), "ParameterCount: text decoder, no vision tower / MTP head"),
            ("  routed experts", human_count(p.routed_experts), "sharded over EP on the trainer"),
            ("  everything else", human_count(p.non_expert), "sharded over TP·PP on the trainer"),
            ("KV per token", human_bytes(self.kv_bytes_per_token),
             f"2 · {s.full_attention_layers} full-attn layers · {s.kv_heads} kv heads · {s.head_dim} · "
             f"{self.kv_dtype_bytes} B"),
            ("linear state per sequence", human_bytes(s.linear_state_bytes),
             f"{linear} linear-attn layers, fixed size"),
            ("trajectory length", f"{self.trajectory_tokens:,} tokens", "the train context budget"),
            ("train GPUs", f"{lay.train_gpus} ({lay.train_nodes} nodes × {lay.gpus_per_node})",
             f"TP{lay.tensor_parallel} · PP{lay.pipeline_parallel} · CP{lay.context_parallel} · "
             f"DP{lay.data_parallel}, EP{lay.expert_parallel}"),
            ("params per train GPU", human_count(self.train_parameters_per_gpu),
             "experts ÷ (EP·PP) + (layers ÷ PP + embeddings) ÷ TP"),
            ("train memory per GPU", f"{human_bytes(self.train_bytes_per_gpu)} of {gpu}",
             f"{self.train_bytes_per_param} B/param: bf16 weights, fp32 grads, master weights and Adam"),
            ("  left for activations", human_bytes(max(0, lay.gpu_memory_bytes - self.train_bytes_per_gpu)), ""),
            ("engines", f"{lay.engines} × TP{lay.engine_tensor_parallel} on {lay.inference_nodes} nodes", "vLLM"),
            ("engine weights per GPU", human_bytes(self.engine_weights_bytes_per_gpu),
             f"parameters · {self.weight_bytes} B ÷ TP"),
            ("KV cache per engine", human_bytes(self.kv_capacity_bytes),
             f"{gpu} · {lay.gpu_memory_utilization:g} · {lay.engine_tensor_parallel} − engine weights"),
            ("KV per token per engine", human_bytes(self.engine_kv_bytes_per_token),
             f"kv heads replicated up to TP{lay.engine_tensor_parallel}"),
            ("KV capacity", f"{human_tokens(self.kv_capacity_tokens)} per engine, "
             f"{human_tokens(self.kv_capacity_tokens * lay.engines)} total", "KV cache ÷ KV per token"),
            ("trajectories per engine", str(self.trajectories_per_engine),
             f"KV cache ÷ (trajectory · KV per token + linear state){seqs}"),
            ("systems ceiling", str(self.systems_ceiling), "engines · trajectories per engine"),
            ("algorithmic ceiling", str(self.algorithmic_ceiling),
             f"(S+1)·B·n = ({self.max_staleness}+1)·{self.prompts_per_step}·{self.samples_per_prompt}"),
            ("concurrency", str(self.concurrency), "min(systems, algorithmic)"),
            ("train fits", _yes(self.fits_train), "train memory per GPU ≤ GPU memory"),
            ("engine fits", _yes(self.fits_engine), "KV room for at least one trajectory"),
            ("layout", "ok" if not self.problems else "; ".join(self.problems), ""),
        ]  # fmt: skip


def cluster_plan(
    config: Mapping[str, Any],
    layout: ClusterLayout,
    *,
    trajectory_tokens: int,
    max_staleness: int,
    prompts_per_step: int,
    samples_per_prompt: int,
    weight_bytes: int = BF16_BYTES,
    kv_dtype_bytes: int = BF16_BYTES,
    train_bytes_per_param: int = MIXED_PRECISION_TRAIN_BYTES_PER_PARAM,
) -> ClusterPlan:
    """The plan of a HF ``config.json`` on ``layout``:

    * train memory per GPU = ``train_parameters_per_gpu`` · 18 B (bf16 weights, fp32 grads, master weights, Adam);
    * engine weights = parameters · 2 B (bf16), split over the engine's TP;
    * KV cache per engine = gpu_memory · gpu_memory_utilization · TP − engine weights;
    * trajectories per engine = KV cache ÷ (trajectory tokens · engine KV bytes per token + linear state per
      sequence), at most ``max_num_seqs``; systems ceiling = engines · that;
    * algorithmic ceiling = (S + 1) · B · n; concurrency = min of the two.
    """
    if trajectory_tokens < 1:
        raise ValueError(f"trajectory length must be at least 1 token, got {trajectory_tokens}")
    shape = ModelShape.from_config(config)
    return ClusterPlan(
        layout=layout,
        parameters=ParameterCount.from_config(config),
        shape=shape,
        trajectory_tokens=trajectory_tokens,
        max_staleness=max_staleness,
        prompts_per_step=prompts_per_step,
        samples_per_prompt=samples_per_prompt,
        weight_bytes=weight_bytes,
        kv_dtype_bytes=kv_dtype_bytes,
        train_bytes_per_param=train_bytes_per_param,
        problems=tuple(layout.problems(shape.layers, routed_experts(config))),
    )


@dataclass(frozen=True)
class NodeSplit:
    """Inference and train nodes, with the measured rates the split came from (trajectories/s per node)."""

    inference_nodes: int
    train_nodes: int
    generation_per_node: float
    train_per_node: float

    @property
    def trainer_idle_share(self) -> float:
        """max(0, 1 − I·g ÷ (T·t)): the share of wall clock the trainer waits for the generation buffer."""
        return trainer_idle_share(self.inference_nodes, self.train_nodes, self.generation_per_node, self.train_per_node)


def trainer_idle_share(
    inference_nodes: int, train_nodes: int, generation_per_node: float, train_per_node: float
) -> float:
    """max(0, 1 − I·g ÷ (T·t)). The generators deliver I·g trajectories/s, the trainer could consume T·t; when it
    gets less it waits (``wait_for_generation_buffer``) for the missing share of the time. Over-provisioned
    generation (I·g > T·t) is held back by the staleness bound instead: the engines wait, the trainer does not."""
    if generation_per_node <= 0 or train_per_node <= 0:
        raise ValueError("throughputs must be positive trajectories/s per node")
    return max(0.0, 1.0 - inference_nodes * generation_per_node / (train_nodes * train_per_node))


def node_split(
    total_nodes: int,
    generation_per_node: float,
    train_per_node: float,
    *,
    min_inference_nodes: int = 1,
    min_train_nodes: int = 1,
) -> NodeSplit:
    """The inference:train split of ``total_nodes`` that keeps the trainer's idle share ≈ 0 with the fewest
    inference nodes: the trainer never waits when I·g ≥ T·t, i.e. with T = N − I, when I ≥ N·t ÷ (g + t); so
    I = ⌈N·t ÷ (g + t)⌉ (clamped to the minimums), T = N − I.

    g: measured generation throughput, trajectories/s per inference node (e.g. one TP8 engine per node);
    t: measured training throughput, trajectories/s per train node (trajectories trained per optimizer step ÷ step
    seconds ÷ train nodes). Re-check the train side's memory (``cluster_plan``) at the new T.
    RECIPE: tune the split so ``wait_for_generation_buffer`` ≈ 0 (the recipe ran 12:4 for 35B, 12:8 for 397B).
    """
    if generation_per_node <= 0 or train_per_node <= 0:
        raise ValueError("throughputs must be positive trajectories/s per node")
    if total_nodes < min_inference_nodes + min_train_nodes:
        raise ValueError(f"{total_nodes} nodes cannot hold {min_inference_nodes} inference + {min_train_nodes} train")
    inference = math.ceil(total_nodes * train_per_node / (generation_per_node + train_per_node) - 1e-9)
    inference = min(max(inference, min_inference_nodes), total_nodes - min_train_nodes)
    return NodeSplit(inference, total_nodes - inference, generation_per_node, train_per_node)


# --- human units -----------------------------------------------------------------------------------------------------


def human_bytes(n: float) -> str:
    """Bytes in binary units: 20480 → "20.0 KiB", 3 · 2**30 → "3.0 GiB"."""
    for unit, size in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def human_count(n: float) -> str:
    """A parameter count in billions (≥ 1e9) or millions: 34_660_000_000 → "34.66 billion"."""
    return f"{n / 1e9:.2f} billion" if abs(n) >= 1e9 else f"{n / 1e6:.2f} million"


def human_tokens(n: int) -> str:
    return f"{n / 1e6:.1f} M tokens" if n >= 10**6 else f"{n:,} tokens"


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"
