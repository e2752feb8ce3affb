"""Where a run's work goes, from its profile's ``backends``: the cluster its jobs are submitted to, the run's vLLM
engines, the runner of each training loop — and, before anything runs, whether the profile can run at all.

* ``cluster_target`` — the Ray cluster and the run's shared root (``cluster.storage/<run id>``, or the run folder
  on a one-machine cluster) when a backend needs one;
* ``engine_fleet`` — the run's vLLM engines (backend ``vllm``): on the cluster, or here without one;
* ``TRAINER_RUNNERS`` — the trainer backend's ``TrainerRunner``: the loop in the flow's process (``local``), our
  loop as a Ray Job (``ray_job``), SkyRL's trainer with our generator as a Ray Job (``skyrl``);
* ``preflight`` (``flows.preflight``) — every reason the profile cannot run as given, before any work.

    target = cluster_target(config, store)              # None: everything runs here
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from flows.config import EngineBackend, PolicySource, RecipeConfig, TrainerBackend
from flows.ledger import engine_claim, stand_in_claims
from flows.preflight import PlacementError, cluster_token_file, needs_cluster, no_address, repo_path
from tasks.cluster import ClusterTarget, JobLedger, RayJobRunner
from tasks.environment import policy_harness
from tasks.fleet import VllmFleet, stop_fleet
from tasks.run_store import RunStore
from tasks.training import TrainerRunner, run_locally
from trainer.cluster.engine_job import FleetSpec

DEFAULT_SERVED_NAME = "policy"


def shared_root(config: RecipeConfig, store: RunStore) -> Path:
    """The run's folder on storage the flow and every node reach (the run folder itself without ``storage``)."""
    storage = config.cluster.storage if config.cluster is not None else None
    return (storage / store.run_id).resolve() if storage is not None else store.root.resolve()


def cluster_target(config: RecipeConfig, store: RunStore) -> ClusterTarget | None:
    cluster = config.cluster
    if cluster is None or not needs_cluster(config):
        return None
    if not cluster.ray_address:
        raise PlacementError(no_address(config))
    return ClusterTarget(
        address=cluster.ray_address,
        root=shared_root(config, store),
        run_id=store.run_id,
        python=repo_path(cluster.python),
        trainer_resources=dict(cluster.trainer_resources),
        job_timeout_s=cluster.job_timeout_s,
        max_job_attempts=cluster.max_job_attempts,
        token_file=cluster_token_file(config),
        reserve=stand_in_claims(config),
        placement_timeout_s=cluster.placement_timeout_s,
    )


def fleet_spec(config: RecipeConfig, root: Path, policy: str, max_model_len: int) -> FleetSpec:
    """The run's engines: how many, what they serve (the base policy; later weights are loaded into it), how each is
    launched and placed; records and logs under ``root``."""
    cluster, vllm = config.cluster, config.engine.vllm
    harness = policy_harness(policy, config.harness).harness if Path(policy).is_dir() else config.planned_harness()
    tensor_parallel = cluster.engine_tensor_parallel if cluster else 1
    claim = engine_claim(config)
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


def engine_fleet(config: RecipeConfig, store: RunStore, policy: str, max_model_len: int) -> VllmFleet | None:
    """The run's vLLM engines (backend ``vllm``), on the cluster when the profile names one; None otherwise."""
    if config.backends.engine is not EngineBackend.VLLM:
        return None
    spec = fleet_spec(config, shared_root(config, store) / "engines", policy, max_model_len)
    return VllmFleet(spec, cluster_target(config, store))


def stop_engines(config: RecipeConfig, store: RunStore) -> None:
    """Stop the run's engines, if it has any (at the pipeline's end, after ``recipe stage``)."""
    if config.backends.engine is EngineBackend.VLLM:
        stop_fleet(shared_root(config, store) / "engines", cluster_target(config, store))


def _local_runner(config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner:
    return run_locally


def _ray_job_runner(config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner:
    assert target is not None  # needs_cluster holds for this backend; cluster_target raised otherwise
    return RayJobRunner(target, ledger)


def _skyrl_runner(config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner:
    from flows.skyrl_jobs import skyrl_entry

    assert target is not None
    return RayJobRunner(target, ledger, skyrl_entry(config))


TRAINER_RUNNERS: dict[TrainerBackend, Callable[[RecipeConfig, ClusterTarget | None, JobLedger], TrainerRunner]] = {
    TrainerBackend.LOCAL: _local_runner,
    TrainerBackend.RAY_JOB: _ray_job_runner,
    TrainerBackend.SKYRL: _skyrl_runner,
}
"""Where a training loop runs, by trainer backend: one ``TrainerRunner`` each (a Ray Job's entry is the only
difference between ``ray_job`` and ``skyrl``)."""
