"""A cluster profile's resource ledger (``trainer.cluster.ledger``): per stage phase, which processes hold which Ray
resources, checked against the cluster's nodes before any work (``flows.preflight``) and printed by ``recipe plan``
and ``recipe run --dry-run``.

Who holds what (one owner of the engines: the run's fleet):

* **the run's engines** (backend ``vllm``) — started by the first stage that generates and kept to the pipeline's
  end: ``cluster.engines`` × ``cluster.engine_resources`` (default ``{GPU: engine_tensor_parallel}``), in every phase;
* **a SkyRL job** (trainer ``skyrl``) — Megatron's policy workers, one ``{GPU: g, CPU: g}`` bundle per train node
  (SkyRL 0.3 ``PPORayActorGroup``'s PACK placement group, ``skyrl/backends/skyrl_train/workers/worker.py``), and its
  driver (``trainer.skyrl.main._run``: one CPU). Its rollouts go to the run's engines (``external_server_urls``,
  weights over SkyRL's NCCL broadcast): SkyRL starts engines of its own only when the run has none
  (``{GPU: 1, CPU: 1}`` per engine GPU, ``skyrl/backends/skyrl_train/inference_servers/setup.py``);
* **our loop as a Ray Job** (trainer ``ray_job``) — its entry point on a node with ``cluster.trainer_resources``;
  with ``cluster.megatron_stand_in`` it also holds Megatron's placement group while it trains (a CPU cluster that
  declares the GPU profile's GPUs runs the GPU plan's schedule).

Training jobs of one stage run one at a time (the systems trials, the ablation arms), so a stage has two phases at
most: its rollouts and evals on the engines alone, and one job beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

from flows.config import ClusterSection, RecipeConfig, StageName
from flows.placement.engines import ENGINES
from flows.placement.trainers import TRAINERS
from trainer.cluster.ledger import Phase, Resources, Shortfall, balance, cluster_total, peak

JOB_STAGES = (StageName.SYSTEMS, StageName.OVERFIT, StageName.ABLATIONS, StageName.HERO)


@dataclass(frozen=True)
class RunLedger:
    phases: tuple[Phase, ...]
    nodes: tuple[Resources, ...]

    def shortfalls(self) -> list[Shortfall]:
        return balance(self.phases, self.nodes)

    def lines(self) -> list[str]:
        """The ledger as text: the cluster; each distinct holding with the phases that hold it, its holders and its
        totals against the cluster's; then the verdict (the first phase that does not fit, and the others)."""
        resources = sorted({k for node in self.nodes for k in node}, key=lambda name: (name != "GPU", name))
        capacity = ", ".join(f"{name} {cluster_total(self.nodes, name):g}" for name in resources)
        out = [f"resource ledger — cluster: {len(self.nodes)} nodes, {capacity}"]
        holdings: dict[str, list[Phase]] = {}
        for phase in self.phases:
            holdings.setdefault(repr(phase.claims), []).append(phase)
        for phases in holdings.values():
            first = phases[0]
            used = ", ".join(f"{name} {first.total(name):g}/{cluster_total(self.nodes, name):g}" for name in resources)
            stages = ", ".join(p.stage + (f" × {p.repeats}" if p.repeats > 1 else "") for p in phases)
            out.append(f"  {first.name} ({stages}): {used}")
            out += [f"    {claim.holder}: {claim.describe()}" for claim in first.claims]
        found = self.shortfalls()
        if found:
            others = ", ".join(f.phase.stage for f in found[1:])
            out.append(f"does not fit: {found[0].message()}" + (f" (so do {others})" if others else ""))
        else:
            gpus, where = peak(self.phases, "GPU")
            at = f"; peak {gpus:g} GPU in {where.label}" if where is not None else ""
            out.append(f"ledger balances: every phase fits the cluster{at}")
        return out


def cluster_nodes(cluster: ClusterSection) -> tuple[Resources, ...]:
    """The cluster's nodes as Ray counts them: those ``recipe cluster up`` starts, else the profile's GPU nodes."""
    if cluster.local is not None:
        local = [cluster.local.head, *cluster.local.workers]
        return tuple(
            {k: v for k, v in {"CPU": n.num_cpus, "GPU": n.num_gpus, **n.resources}.items() if v} for n in local
        )
    node = {"GPU": float(cluster.gpus_per_node), "CPU": float(cluster.cpus_per_node)}
    return tuple(dict(node) for _ in range(cluster.inference_nodes + cluster.train_nodes))


def jobs_in(config: RecipeConfig, stage: StageName) -> int:
    """Training jobs ``stage`` runs, one at a time: the systems sweep's trials (the baseline knobs, then each other
    value of each knob: ``tasks.systems.one_factor_trials``), every ablation arm, one for overfit and hero."""
    if stage is StageName.SYSTEMS:
        trainer = config.trainer
        baseline = {
            "token_budget": trainer.token_budget,
            "max_num_seqs": config.engine.max_num_seqs,
            "workers": config.rollout.workers,
            "layout": trainer.layout,
        }
        sweep = config.stages.systems.sweep.model_dump()
        return 1 + sum(len({value for value in values if value != baseline[name]}) for name, values in sweep.items())
    if stage is StageName.ABLATIONS:
        return len(config.stages.ablations.arms)
    return 1 if stage in JOB_STAGES else 0


def run_ledger(config: RecipeConfig) -> RunLedger | None:
    """The ledger of a profile with a cluster section; None without one (everything runs on this machine)."""
    if config.cluster is None:
        return None
    engines = ENGINES[config.backends.engine].claim(config)
    fleet = (engines,) if engines is not None else ()
    job = TRAINERS[config.backends.trainer].claims(config, engines)
    phases = []
    for stage in StageName:
        if engines is not None:
            phases.append(Phase(stage.value, "rollouts and evals", fleet))
        jobs = jobs_in(config, stage)
        if jobs and job:
            phases.append(Phase(stage.value, "training job", fleet + job, repeats=jobs))
    return RunLedger(tuple(phases), cluster_nodes(config.cluster))
