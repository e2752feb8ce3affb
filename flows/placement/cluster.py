"""The Ray cluster a run's backends need: whether they need one, and the ``ClusterTarget`` its jobs go to."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows.config import RecipeConfig
from flows.placement.base import PlacementError, cluster_token_file, repo_path, shared_root
from flows.placement.engines import ENGINES
from flows.placement.trainers import TRAINERS
from tasks.run_store import RunStore

if TYPE_CHECKING:  # preflight imports placement and must stay light
    from tasks.cluster import ClusterTarget


def needs_cluster(config: RecipeConfig) -> bool:
    """A backend of the profile runs on the Ray cluster (a training backend there, or vLLM engines in a profile that
    names a cluster)."""
    backends = config.backends
    return ENGINES[backends.engine].on_cluster(config) or TRAINERS[backends.trainer].on_cluster(config)


def no_address(config: RecipeConfig) -> str:
    return (
        f"profile {config.profile!r} runs on a Ray cluster (backends: engine {config.backends.engine.value}, trainer "
        f"{config.backends.trainer.value}) but names none: set its dashboard with --set "
        f"cluster.ray_address=http://HEAD:8265 and the network it trusts with --set cluster.trusted_network=CIDR "
        f"(recipe run --profile {config.profile} --dry-run shows what would run where)"
    )


def cluster_target(config: RecipeConfig, store: RunStore) -> ClusterTarget | None:
    """Where the run's jobs are submitted and its shared files live; None when everything runs here."""
    cluster = config.cluster
    if cluster is None or not needs_cluster(config):
        return None
    if not cluster.ray_address:
        raise PlacementError(no_address(config))
    from tasks.cluster import ClusterTarget

    return ClusterTarget(
        address=cluster.ray_address,
        root=shared_root(config, store),
        run_id=store.run_id,
        python=repo_path(cluster.python),
        trainer_resources=dict(cluster.trainer_resources),
        job_timeout_s=cluster.job_timeout_s,
        max_job_attempts=cluster.max_job_attempts,
        token_file=cluster_token_file(config),
        reserve=TRAINERS[config.backends.trainer].reserve(config),
        placement_timeout_s=cluster.placement_timeout_s,
    )
