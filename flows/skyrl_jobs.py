"""A stage's training loop as a SkyRL run (backend ``skyrl``): the ``SkyRLRun`` of a ``LoopConfig``, the loops a
profile's stages would run (``planned_loops``, for ``recipe run --dry-run`` and ``recipe cluster render``), and the
runner that submits them through the one Ray Job path (``tasks.cluster.RayJobRunner`` with ``SkyRLEntry``).

    run = skyrl_run_for(config, loop, name="qwen36-35b-overfit", model="Qwen/Qwen3.6-35B-A3B", storage="/shared/r1/...")
    render(run).lines()             # the job's overrides
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from envs.harness.agent import HarnessConfig
from envs.harness.policy import PolicyHarness
from flows.config import PolicySource, RecipeConfig
from flows.layout import cluster_layout
from flows.placement.base import REPO_ROOT
from flows.placement.engines import ENGINES
from tasks.cluster import SkyRLEntry
from tasks.systems import Knobs, one_factor_trials
from tasks.training import loop_config
from trainer.algorithms.config import AlgorithmConfig
from trainer.cluster.train_job import TrainJobSpec
from trainer.loops import AsyncLoopConfig
from trainer.loops.config import LoopConfig
from trainer.loops.kinds import LoopKind
from trainer.skyrl.render import RolloutPlan, SkyRLRun, render

SKYRL_PYTHON = REPO_ROOT / ".venv-cluster" / "bin" / "python"
SCHEMA_CHECK = REPO_ROOT / "trainer" / "skyrl" / "schema_check.py"
CHECK_TIMEOUT_S = 600.0
RUN_ROOT = "<run>"


def base_model(config: RecipeConfig) -> str:
    """What a SkyRL run starts from: the hub id, or the policy folder every node reads."""
    policy = config.policy
    return policy.hub_id or "" if policy.source is PolicySource.HUB else str(policy.path)


def skyrl_run_for(
    config: RecipeConfig, loop: LoopConfig, *, name: str, model: str, storage: str, stage: str, arm: str | None = None
) -> SkyRLRun:
    """``loop`` (a stage's, as the local trainer would run it) as a SkyRL run on the profile's cluster layout."""
    assert config.cluster is not None  # the skyrl backend needs a cluster section (RecipeConfig's validator)
    fully_async = isinstance(loop, AsyncLoopConfig)
    rollout, cluster = config.rollout, config.cluster
    plan = RolloutPlan(
        prompts_per_step=loop.prompts_per_step,
        samples_per_prompt=loop.samples_per_prompt,
        workers=loop.workers if fully_async else loop.prompts_per_step,
        max_staleness=loop.max_staleness if fully_async else 0,
        epochs=rollout.epochs,
        steps=loop.steps,
        checkpoint_every=loop.checkpoint_every,
        eval_every=rollout.eval_every,
        eval_passes=config.stages.hero.eval_passes,
        max_concurrency=rollout.max_concurrency,
        rate_limit_per_s=rollout.rate_limit_per_s,
        fully_async=fully_async,
    )
    return SkyRLRun(
        name=name,
        model=model,
        trainer=loop.trainer,
        harness=loop.harness,
        rollout=plan,
        layout=cluster_layout(config),
        max_model_len=cluster.max_model_len or loop.harness.context_budget_tokens,
        optimizer_offload_fraction=cluster.optimizer_offload_fraction,
        served_model_name=config.engine.served_model_name,
        seed=loop.seed,
        storage=storage,
        engine_timeout_s=config.engine.timeout_s,
        sandbox=config.backends.sandbox.value,
        sandbox_pool_per_world=config.sandbox.pool_per_world,
        provenance={"profile": config.profile, "stage": stage} | ({"arm": arm} if arm else {}),
        **_fleet(config, loop),
    )


FLEET_PLACEHOLDER = "<run engine URLs>"


def _fleet(config: RecipeConfig, loop: LoopConfig) -> dict[str, Any]:
    """The run's engines for the job (one owner: ``flows.ledger``): the loop's, or — planned before they exist — a
    placeholder; none when the run has no engines of its own (SkyRL then starts the job's)."""
    if loop.engines is not None:
        token = loop.engines.token_file
        return {"fleet_urls": loop.engines.urls, "engine_token_file": str(token) if token else None}
    if ENGINES[config.backends.engine].on_cluster(config):
        return {"fleet_urls": (FLEET_PLACEHOLDER,), "engine_token_file": "<run>/engines/token"}
    return {}


def planned_loops(config: RecipeConfig, hero_arm: str | None = None) -> dict[str, tuple[str, LoopConfig]]:
    """The training loops a profile's stages would run, by label: (stage, loop), from the profile alone — the systems
    stage's baseline knobs, the recipe's prior arm for the hero (the ablations choose the real one), the profile's
    harness (a base's own ``harness.json`` is read at run time)."""
    settings = PolicyHarness(apps=None, harness=HarnessConfig(**config.harness))
    rollout, stages = config.rollout, config.stages

    def loop(kind: LoopKind, arm: dict[str, Any], nudge: bool, shape: dict[str, Any]) -> LoopConfig:
        algorithm = AlgorithmConfig(**config.trainer.algorithm.model_dump() | arm)
        harness = settings.model_copy(update={"harness": settings.harness.model_copy(update={"context_nudge": nudge})})
        return loop_config(
            kind,
            task_ids=[],
            settings=harness,
            trainer=config.trainer.model_copy(update={"algorithm": algorithm}),
            seed=config.seed,
            max_num_seqs=config.engine.max_num_seqs,
            **shape,
        )

    loops: dict[str, tuple[str, LoopConfig]] = {}
    systems, overfit, ablations, hero = stages.systems, stages.overfit, stages.ablations, stages.hero
    runtime = config.backends.runtime
    async_knobs = {"workers": rollout.workers, "max_staleness": rollout.max_staleness, "runtime": runtime}
    trial_shape = _shape(systems.prompts_per_step, systems.samples_per_prompt, systems.steps_per_trial, 0)
    baseline = Knobs(config.trainer.token_budget, config.engine.max_num_seqs, rollout.workers, config.trainer.layout)
    for index, knobs in enumerate(one_factor_trials(baseline, **systems.sweep.model_dump())):
        trial = loop(LoopKind.ASYNC, {}, False, trial_shape | {"max_staleness": rollout.max_staleness})
        assert isinstance(trial, AsyncLoopConfig)
        loops[f"trial-{index}-{knobs.label()}"] = ("systems", knobs.apply(trial))
    every = rollout.checkpoint_every
    overfit_shape = _shape(overfit.prompts_per_step, overfit.samples_per_prompt, overfit.steps, every)
    loops["overfit"] = ("overfit", loop(LoopKind.SYNC, {}, False, overfit_shape))
    arm_shape = _shape(ablations.prompts_per_step, ablations.samples_per_prompt, ablations.steps, 0) | async_knobs
    for name, arm in ablations.arms.items():
        loops[name] = ("ablations", loop(ablations.loop, arm.algorithm, arm.context_nudge, arm_shape))
    landed = hero_arm or ablations.prior
    hero_shape = _shape(
        hero.prompts_per_step or rollout.prompts_per_step,
        hero.samples_per_prompt or rollout.samples_per_prompt,
        hero.steps,
        hero.checkpoint_every,
    )
    hero_shape |= async_knobs
    arm = ablations.arms[landed]
    loops[f"hero-{landed}"] = ("hero", loop(LoopKind.ASYNC, arm.algorithm, arm.context_nudge, hero_shape))
    return loops


def _shape(prompts_per_step: int, samples_per_prompt: int, steps: int, checkpoint_every: int) -> dict[str, Any]:
    """A loop's size as its stage sets it."""
    return {
        "prompts_per_step": prompts_per_step,
        "samples_per_prompt": samples_per_prompt,
        "steps": steps,
        "checkpoint_every": checkpoint_every,
    }


def skyrl_entry(config: RecipeConfig) -> SkyRLEntry:
    """The ``JobEntry`` of the skyrl backend: each loop rendered as SkyRL overrides, storage the job's own folder."""

    def overrides(spec: TrainJobSpec, stage: str) -> list[str]:
        run = skyrl_run_for(
            config,
            spec.loop_config(),
            name=f"{config.profile}-{stage}-{spec.label}",
            model=base_model(config) if config.policy.source is PolicySource.HUB else str(spec.policy_dir),
            storage=str(spec.out_dir),
            stage=stage,
        )
        return render(run).lines()

    return SkyRLEntry(overrides)


def plan_details(config: RecipeConfig, check: bool = True) -> list[str]:
    """The dry run's SkyRL lines: the first job's overrides in full, the others' differences, and whether SkyRL 0.3's
    own config classes build every set (``trainer/skyrl/schema_check.py`` in ``.venv-cluster``; ``check`` False:
    not run)."""
    overrides, sets = _overrides(config)
    return [*overrides, _schema_check(sets) if check else "not checked (check=False)"]


def _overrides(config: RecipeConfig) -> tuple[list[str], list[list[str]]]:
    """The SkyRL jobs' overrides: the first job's lines, the others' differences; and every set (for the check)."""
    from trainer.skyrl.render import render

    sets: list[tuple[str, list[str]]] = []
    for label, (stage, loop) in planned_loops(config).items():
        storage = f"{RUN_ROOT}/{stage}/{label}"
        name = f"{config.profile}-{stage}-{label}"
        run = skyrl_run_for(config, loop, name=name, model=base_model(config), storage=storage, stage=stage)
        sets.append((label, render(run).lines()))
    first_label, first = sets[0]
    lines = [f"skyrl overrides of job {first_label} ({len(first)} keys):", *(f"  {line}" for line in first)]
    for label, other in sets[1:]:
        changed = sorted(set(other) - set(first))
        lines.append(f"job {label} differs in {len(changed)} keys: {' '.join(changed)}")
    return lines, [lines for _, lines in sets]


def _schema_check(sets: list[list[str]]) -> str:
    """Every set through SkyRL 0.3's config classes in ``.venv-cluster`` (one process), or why not."""
    if not SKYRL_PYTHON.exists():
        return "not checked against SkyRL's config classes: no .venv-cluster here (make .venv-cluster/.installed)"
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for index, lines in enumerate(sets):
            path = Path(tmp) / f"{index}.txt"
            path.write_text("\n".join(lines) + "\n")
            files.append(str(path))
        try:
            command = [str(SKYRL_PYTHON), str(SCHEMA_CHECK), *files]
            done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"SkyRL's config check did not finish within {CHECK_TIMEOUT_S:g} s"
    try:
        reports = json.loads(done.stdout)
    except ValueError:
        return f"SkyRL's config check failed to run: {done.stderr.strip()[-300:]}"
    reports = reports if isinstance(reports, list) else [reports]
    failed = [r for r in reports if done.returncode != 0 and r.get("built") != "passed"]
    version = reports[0].get("skyrl", "?")
    if done.returncode == 0:
        return f"all {len(reports)} override sets build and validate with SkyRL {version}'s config classes"
    return f"SkyRL {version} refused {len(failed) or 'some'} set(s): {json.dumps(reports)[:600]}"
