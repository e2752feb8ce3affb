"""Where a run's work goes, from its profile's ``backends`` — one package, one registry per axis:

* ``ENGINES[EngineBackend]`` (``flows.placement.engines``) — where generation happens: our engine, a configured URL,
  or the run's vLLM fleet;
* ``TRAINERS[TrainerBackend]`` (``flows.placement.trainers``) — where a training loop runs: here, our loop as a Ray
  Job, or SkyRL's trainer as a Ray Job;
* ``cluster_target`` / ``needs_cluster`` (``flows.placement.cluster``) — the Ray cluster and the run's shared root
  when a backend needs one.

Each registry entry is one class that checks itself before any work (``flows.preflight``), holds its claims in the
resource ledger (``flows.ledger``), describes itself in the dry run (``flows.dry_run``), and gives the stage its
fleet or runner (``flows.stage``). Nothing outside this package branches on a backend.

    target = cluster_target(config, store)                                  # None: everything runs here
    runner = TRAINERS[config.backends.trainer].runner(config, target, ledger)
"""

from flows.placement.base import PlacementError, cluster_token_file, repo_path, shared_root
from flows.placement.cluster import cluster_target, needs_cluster, no_address
from flows.placement.engines import ENGINES, FleetRequest, fleet_spec
from flows.placement.trainers import TRAINERS

__all__ = [
    "ENGINES",
    "TRAINERS",
    "FleetRequest",
    "PlacementError",
    "cluster_target",
    "cluster_token_file",
    "fleet_spec",
    "needs_cluster",
    "no_address",
    "repo_path",
    "shared_root",
]
