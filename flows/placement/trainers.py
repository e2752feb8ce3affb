"""The trainer backends (``backends.trainer``), one class each in ``TRAINERS``: where a training loop runs.

Each knows, for a profile: whether it needs the Ray cluster; what one of its jobs holds there beside the run's
engines (``claims``: the resource ledger, ``flows.ledger``) and what the job itself must reserve (``reserve``:
Megatron's placement group, held by our loop in its stand-in); the dry run's line for a job; and the stage's
``TrainerRunner``.

* ``local`` — the loop in the flow's process;
* ``ray_job`` — our loop as a Ray Job (``tasks.cluster.RayJobRunner``, entry ``trainer.cluster.train_job``);
* ``skyrl`` — SkyRL's trainer (Megatron) with our generator, as a Ray Job (entry ``trainer.skyrl.main``).

A new trainer backend is one class here and one line in ``TRAINERS``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

from flows.config import ClusterSection, RecipeConfig, TrainerBackend
from flows.placement.base import repo_path
from trainer.cluster.ledger import Claim

if TYPE_CHECKING:  # preflight imports placement and must stay light: a runner's modules load when one is made
    from tasks.cluster import ClusterTarget, JobLedger
    from tasks.training import TrainerRunner


class TrainerPlacement(Protocol):
    backend: ClassVar[TrainerBackend]

    def on_cluster(self, config: RecipeConfig) -> bool: ...

    def claims(self, config: RecipeConfig, run_engines: Claim | None) -> tuple[Claim, ...]:
        """What one training job holds on the cluster beside the run's engines (``run_engines``: None when the run
        has none there)."""
        ...

    def reserve(self, config: RecipeConfig) -> tuple[Claim, ...]:
        """What a job holds as placement groups of its own while it trains (our loop standing in for Megatron)."""
        ...

    def describe(self, config: RecipeConfig, label: str, shape: str) -> str: ...

    def details(self, config: RecipeConfig, check: bool) -> list[str]:
        """More dry-run lines about the backend's jobs (none but SkyRL's rendered overrides)."""
        ...

    def runner(self, config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner: ...


def megatron_claim(cluster: ClusterSection, holder: str) -> Claim:
    """Megatron's policy workers: a ``{GPU: g, CPU: g}`` bundle per train node (SkyRL's PACK placement group)."""
    g = cluster.gpus_per_node
    return Claim(holder, cluster.train_nodes, {"GPU": g, "CPU": g})


def _job_command(config: RecipeConfig, module: str, arguments: str) -> str:
    cluster = config.cluster
    python = repo_path(cluster.python) if cluster else "python"
    resources = dict(cluster.trainer_resources) if cluster else {}
    return f"{python} -m {module} {arguments} " + (f"on a node with {resources}" if resources else "on any node")


class LocalTrainer:
    backend: ClassVar[TrainerBackend] = TrainerBackend.LOCAL

    def on_cluster(self, config: RecipeConfig) -> bool:
        return False

    def claims(self, config: RecipeConfig, run_engines: Claim | None) -> tuple[Claim, ...]:
        return ()

    def reserve(self, config: RecipeConfig) -> tuple[Claim, ...]:
        return ()

    def describe(self, config: RecipeConfig, label: str, shape: str) -> str:
        return f"train {label}: {shape}, in the flow's process"

    def details(self, config: RecipeConfig, check: bool) -> list[str]:
        return []

    def runner(self, config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner:
        from tasks.training import run_locally

        return run_locally


class RayJobTrainer:
    backend: ClassVar[TrainerBackend] = TrainerBackend.RAY_JOB
    STAND_IN = "Megatron policy workers (stand-in: held by our loop)"

    def on_cluster(self, config: RecipeConfig) -> bool:
        return True

    def claims(self, config: RecipeConfig, run_engines: Claim | None) -> tuple[Claim, ...]:
        assert config.cluster is not None  # the profile's validator wants a cluster for this backend
        return (*self.reserve(config), Claim("training job (our loop)", 1, dict(config.cluster.trainer_resources)))

    def reserve(self, config: RecipeConfig) -> tuple[Claim, ...]:
        cluster = config.cluster
        return (megatron_claim(cluster, self.STAND_IN),) if cluster is not None and cluster.megatron_stand_in else ()

    def describe(self, config: RecipeConfig, label: str, shape: str) -> str:
        from tasks.cluster import TRAIN_MODULE

        return f"job {label}: {shape}: {_job_command(config, TRAIN_MODULE, '<job folder>/spec.json')}"

    def details(self, config: RecipeConfig, check: bool) -> list[str]:
        return []

    def runner(self, config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner:
        assert target is not None  # needs_cluster holds for this backend; cluster_target raised otherwise
        from tasks.cluster import RayJobRunner

        return RayJobRunner(target, ledger)


class SkyRLTrainer:
    backend: ClassVar[TrainerBackend] = TrainerBackend.SKYRL

    def on_cluster(self, config: RecipeConfig) -> bool:
        return True

    def claims(self, config: RecipeConfig, run_engines: Claim | None) -> tuple[Claim, ...]:
        cluster = config.cluster
        assert cluster is not None
        claims = [
            megatron_claim(cluster, "Megatron policy workers"),
            Claim("SkyRL driver (our generator)", 1, {"CPU": 1, **cluster.trainer_resources}),
        ]
        if run_engines is None:  # no fleet of the run's: SkyRL starts the job's own engines
            claims.append(
                Claim("SkyRL's own engines", cluster.engines * cluster.engine_tensor_parallel, {"GPU": 1, "CPU": 1})
            )
        return tuple(claims)

    def reserve(self, config: RecipeConfig) -> tuple[Claim, ...]:
        return ()  # SkyRL's own placement code holds Megatron's group

    def describe(self, config: RecipeConfig, label: str, shape: str) -> str:
        from tasks.cluster import SKYRL_MODULE

        return f"job {label}: {shape}: {_job_command(config, SKYRL_MODULE, '<overrides>')}"

    def details(self, config: RecipeConfig, check: bool) -> list[str]:
        from flows.skyrl_jobs import plan_details

        return plan_details(config, check)

    def runner(self, config: RecipeConfig, target: ClusterTarget | None, ledger: JobLedger) -> TrainerRunner:
        from flows.skyrl_jobs import skyrl_entry

        assert target is not None
        from tasks.cluster import RayJobRunner

        return RayJobRunner(target, ledger, skyrl_entry(config))


TRAINERS: dict[TrainerBackend, TrainerPlacement] = {
    TrainerBackend.LOCAL: LocalTrainer(),
    TrainerBackend.RAY_JOB: RayJobTrainer(),
    TrainerBackend.SKYRL: SkyRLTrainer(),
}
