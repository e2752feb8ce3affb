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

from envs.harness.tool_formats import TOOL_FORMATS, vllm_chat_flags
from flows.config import RecipeConfig
from flows.ledger import run_ledger
from flows.placement import ENGINES, TRAINERS, needs_cluster
from flows.skyrl_jobs import base_model, planned_loops
from tasks.tracking.trackers import TRACKERS
from trainer.loops import AsyncLoopConfig


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
    return ENGINES[config.backends.engine].describe(config, base_model(config) or "<base policy>")


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
    trainer = TRAINERS[config.backends.trainer]
    for label, (stage, loop) in planned_loops(config).items():
        kind = "async" if isinstance(loop, AsyncLoopConfig) else "sync"
        shape = f"{kind} loop, {loop.steps} steps of {loop.prompts_per_step} prompts × {loop.samples_per_prompt}"
        line = trainer.describe(config, label, shape)
        by_stage.setdefault(stage, []).append(line)
    return by_stage


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
    details = TRAINERS[config.backends.trainer].details(config, check)
    return lines + (["", *details] if details else [])


def print_plan(config: RecipeConfig) -> bool:
    """Print the plan; whether its resource ledger balances (True without a cluster)."""
    print("\n".join(plan_lines(config)))
    ledger = run_ledger(config)
    return ledger is None or not ledger.shortfalls()
