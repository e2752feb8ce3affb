"""``recipe run --profile P --dry-run``: what each stage would run where, from the profile alone — nothing starts.

Printed: where the run's files go (the run folder, the shared root on a cluster, the data), the run's engines (how
many, each one's launch line and resources, how weights reach them), then per stage the light work done in the flow's
process, what goes to the engines, and each training job (its entry point, the resources its node needs; for the
``skyrl`` backend its rendered overrides — the first job's in full, the others as the keys that differ — checked
with SkyRL 0.3's own config classes when ``.venv-cluster`` has SkyRL, ``trainer/skyrl/schema_check.py``).

Loops are the profile's: the systems stage's baseline knobs (the sweep picks at run time) and the recipe's prior arm
for the hero (the ablations land the real one).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from envs.harness.tool_formats import TOOL_FORMATS, vllm_chat_flags
from flows.config import EngineBackend, RecipeConfig, TrainerBackend
from flows.ledger import run_ledger
from flows.placement import fleet_spec
from flows.preflight import REPO_ROOT, needs_cluster, repo_path
from flows.skyrl_jobs import base_model, planned_loops, skyrl_run_for
from tasks.cluster import SKYRL_MODULE, TRAIN_MODULE
from tasks.tracking.trackers import TRACKERS
from trainer.loops import AsyncLoopConfig

SKYRL_PYTHON = REPO_ROOT / ".venv-cluster" / "bin" / "python"
SCHEMA_CHECK = REPO_ROOT / "trainer" / "skyrl" / "schema_check.py"
CHECK_TIMEOUT_S = 600.0
RUN_ROOT = "<run>"


def _where(config: RecipeConfig) -> list[str]:
    cluster = config.cluster
    lines = [f"profile {config.profile}: {config.description}"]
    if needs_cluster(config):
        assert cluster is not None
        address = cluster.ray_address or "NOT SET: --set cluster.ray_address=http://HEAD:8265 (required to run)"
        storage = f"{cluster.storage}/<run id>" if cluster.storage else f"{config.runs_root}/<run id> (no storage set)"
        lines += [
            f"cluster: Ray dashboard {address}",
            f"shared root: {storage} — checkpoints, job specs, shards, staged weights: every node reads and writes it",
        ]
    else:
        lines.append(f"placement: this machine (run folder {config.runs_root}/<run id>)")
    policy = config.policy
    source = policy.hub_id if policy.hub_id else policy.path or f"bootstrapped tiny base under {policy.cache}"
    lines += [f"policy: {policy.source.value} {source}", f"data: {config.environment.data} (worlds and task sets)"]
    harness = config.planned_harness()
    dialect = TOOL_FORMATS[harness.tool_format]
    thinking = {True: "on", False: "off", None: "the template's default"}[harness.thinking]
    flags = " ".join(vllm_chat_flags(dialect, harness.thinking))
    lines.append(f"tool calls: {dialect.name.value}, thinking {thinking} (a vLLM chat route: {flags})")
    tracking = config.tracking
    described = [f"{name.value} ({TRACKERS[name].describe(tracking)})" for name in tracking.backends]
    trackers = "; ".join(described) or "none (the run folder only)"
    lines.append(f"trackers: {trackers}")
    return lines


def _engines(config: RecipeConfig) -> list[str]:
    backend = config.backends.engine
    if backend is EngineBackend.LOCAL:
        return ["engines: our engine, in the flow's process (rollouts) and on loopback HTTP (evals, TITO, MCQ)"]
    if backend is EngineBackend.OPENAI:
        return [f"engines: the configured URL {config.engine.url} (evals, rollouts; training keeps its own engine)"]
    budget = config.harness.get("context_budget_tokens", 1024)
    spec = fleet_spec(config, Path(RUN_ROOT) / "engines", base_model(config) or "<base policy>", budget)
    launch = spec.launch(spec.host or "NODE_ADDRESS", 8000)
    where = f"each with {spec.resources} on the cluster" if needs_cluster(config) else "as processes here"
    sync = "NCCL weight transfer" if spec.device.value == "cuda" else "reload_weights from a new folder per version"
    return [
        f"engines: {spec.engines} × vLLM ({spec.device.value}), {where}, serving {spec.model} as "
        f"{spec.served_model_name}",
        f"  {launch.command()}",
        f"  started by the first stage that generates (a Ray Job: python -m trainer.cluster.engine_job), reused by the "
        f"later stages and a resumed run, stopped when the pipeline ends; weights: pause(keep) → {sync} → resume",
    ]


STAGE_WORK = {
    "derisk": (
        "environment build, every oracle and tool probe through the MCP gateway, per-tool statistics, gate",
        "the base's rollouts of every train task",
    ),
    "tito": ("the token-by-token check against the recorded exchanges, gate", "multi-turn rollouts over HTTP"),
    "systems": ("the sizing plan, gate", None),
    "overfit": ("subset choice, paired test, gate", "subset evals before and after"),
    "ablations": ("paired CIs, the landing rule, gate", "held-out evals of every arm"),
    "hero": ("paired bootstrap CI, gate", "held-out evals of base and trained"),
    "transfer": ("paired CIs, gate", "code-only, terminal and MCQ evals of base and trained"),
}


def _job_lines(config: RecipeConfig) -> dict[str, list[str]]:
    """Per stage, its training jobs (the loops ``planned_loops`` gives) as they would be submitted."""
    by_stage: dict[str, list[str]] = {}
    backend, cluster = config.backends.trainer, config.cluster
    resources = dict(cluster.trainer_resources) if cluster else {}
    python = repo_path(cluster.python) if cluster else "python"
    node = f"on a node with {resources}" if resources else "on any node"
    for label, (stage, loop) in planned_loops(config).items():
        kind = "async" if isinstance(loop, AsyncLoopConfig) else "sync"
        shape = f"{kind} loop, {loop.steps} steps of {loop.prompts_per_step} prompts × {loop.samples_per_prompt}"
        if backend is TrainerBackend.LOCAL:
            line = f"train {label}: {shape}, in the flow's process"
        elif backend is TrainerBackend.RAY_JOB:
            line = f"job {label}: {shape}: {python} -m {TRAIN_MODULE} <job folder>/spec.json {node}"
        else:
            line = f"job {label}: {shape}: {python} -m {SKYRL_MODULE} <overrides> {node}"
        by_stage.setdefault(stage, []).append(line)
    return by_stage


def _skyrl_overrides(config: RecipeConfig) -> tuple[list[str], list[list[str]]]:
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


def plan_lines(config: RecipeConfig, check: bool = True) -> list[str]:
    lines = [*_where(config), *_engines(config), ""]
    jobs = _job_lines(config)
    for index, (stage, (here, engines)) in enumerate(STAGE_WORK.items(), start=1):
        lines.append(f"{index} {stage}")
        lines.append(f"  here: {here}")
        if engines:
            lines.append(f"  engines: {engines}")
        lines += [f"  {line}" for line in jobs.get(stage, [])]
    ledger = run_ledger(config)
    if ledger is not None:
        lines += ["", *ledger.lines()]
    if config.backends.trainer is TrainerBackend.SKYRL:
        overrides, sets = _skyrl_overrides(config)
        lines += ["", *overrides, _schema_check(sets) if check else "not checked (check=False)"]
    return lines


def print_plan(config: RecipeConfig) -> bool:
    """Print the plan; whether its resource ledger balances (True without a cluster)."""
    print("\n".join(plan_lines(config)))
    ledger = run_ledger(config)
    return ledger is None or not ledger.shortfalls()
