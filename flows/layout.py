"""A profile's cluster as the sizing maths' ``ClusterLayout`` (``trainer.sizing``): what ``recipe plan`` sizes and
the SkyRL backend renders (``flows.skyrl_jobs``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from envs.errors import RecipeError

if TYPE_CHECKING:
    from trainer.sizing import ClusterLayout


class PlanError(RecipeError, ValueError):
    """A model config.json that is missing or does not describe a decoder, or a plan without one."""


def cluster_layout(config: Any, **overrides: Any) -> ClusterLayout:
    """The ``ClusterLayout`` of a profile's cluster section and engine, each keyword of ``overrides`` (a
    ``LAYOUT_FLAGS`` name) replacing its value; without a profile (or cluster section): one engine and one train
    node of 8 GPUs. ``PlanError`` for an impossible layout."""
    from trainer.sizing import GIB, ClusterLayout

    cluster = config.cluster if config is not None else None
    values: dict[str, Any] = {"gpus_per_node": 8, "gpu_memory_gib": 141.0, "gpu_memory_utilization": 0.85}
    if cluster is not None:
        values |= {
            "gpus_per_node": cluster.gpus_per_node,
            "gpu_memory_gib": cluster.gpu_memory_gib,
            "gpu_memory_utilization": cluster.gpu_memory_utilization,
            "inference_nodes": cluster.inference_nodes,
            "engines": cluster.engines,
            "engine_tensor_parallel": cluster.engine_tensor_parallel,
            "train_nodes": cluster.train_nodes,
            "tensor_parallel": cluster.megatron_tensor_parallel,
            "expert_parallel": cluster.megatron_expert_parallel,
            "pipeline_parallel": cluster.megatron_pipeline_parallel,
            "context_parallel": cluster.megatron_context_parallel,
            "max_num_seqs": config.engine.max_num_seqs,
        }
    values |= overrides
    values.setdefault("engines", 1)
    values.setdefault("engine_tensor_parallel", values["gpus_per_node"])
    values.setdefault(
        "inference_nodes", math.ceil(values["engines"] * values["engine_tensor_parallel"] / values["gpus_per_node"])
    )
    values.setdefault("train_nodes", 1)
    values.setdefault("tensor_parallel", values["gpus_per_node"])
    gib = values.pop("gpu_memory_gib")
    try:
        return ClusterLayout(gpu_memory_bytes=int(gib * GIB), **values)
    except ValueError as error:
        raise PlanError(f"layout: {error}") from None
