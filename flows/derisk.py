"""Stage 1 · de-risk the environment: are the tasks valid, the tools sound, and is there anything to learn?

1. The environment (worlds + tasks) and the base policy are prepared (the local profile bootstraps its tiny base,
   cached by content hash).
2. Every task's oracle and every tool probe run through the MCP gateway in pooled stdio sandboxes — with the
   profile's known-bad variants, if any — and every call lands in the catalog. A team's own environment
   (``environment.file``) may have no oracles: its servers are started alone on each world and its user and schema
   probes stand in (``envs.byo.probes``); the report lists what could not run.
3. The base rolls out each train task ``rollout_samples`` times, through pooled gateway sandboxes serving its apps.
4. DuckDB over the catalog: per tool, calls, failure rate on known-good calls, empty-on-success rate, timeouts, the
   oracle pass rate of tasks that use it; top error signatures with advice; infra vs model errors; reward variance
   per task.

Gate: oracle ≥ 99 %, infra ≤ 2 %, no tool past its failure / empty / timeout threshold, and at least the overfit
subset's size of train tasks with reward variance. Outputs: the policy, the data folder, the variance table.

    recipe stage derisk --run RUN        (or as the first stage of ``recipe run``)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from prefect import flow

from envs.build import load_tasks
from envs.byo.verifiers_env import verifiers_environment_file
from envs.files import atomic_write_json
from envs.judge_audit import JUDGE_AUDIT_FILE, JudgeAudit
from envs.options import BadVariant
from envs.oracle import with_wrong_oracle
from envs.types import TaskSpec
from evals.spec import HarnessKind
from flows.config import Defect, StageName
from flows.stage import DEFAULT_RUNS_ROOT, StageRun, open_stage
from flows.stage_gates import DeriskMeasured, derisk_gate
from flows.stage_work import StageWork
from tasks import derisk as derisk_tasks
from tasks.artifacts import log
from tasks.context import RolloutJob
from tasks.environment import prepare_environment, prepare_own_environment, prepare_policy
from tasks.evaluation import EvalJob
from tasks.plots import bar_chart
from tasks.validation import Suite, task_frame, validate


@flow(name="derisk", log_prints=True)
def derisk(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 1 · de-risk: oracles, probes and base rollouts through the gateway; per-tool failure analysis."""
    with open_stage(run, StageName.DERISK, Path(runs_root)) as stage:
        config, section = stage.config, stage.section
        environment, source = config.environment, config.policy
        subset_size = config.stages.overfit.subset_size
        with stage.timed("environment"):
            generated = prepare_environment(environment.data, environment.seed, environment.worlds_per_domain)
            own = environment.file
            if environment.verifiers is not None:
                own = verifiers_environment_file(environment.verifiers, environment.data)
            data = generated if own is None else prepare_own_environment(own, environment.data)
            stage.output("data", data.resolve())  # the build this run uses (later stages read it from here)
            if data != generated:  # a team's own: the generated worlds still teach the local base
                stage.output("base_data", generated.resolve())
            everything = load_tasks(data)
            validate(Suite.TASK_SET, task_frame(everything))
        # oracle_worlds names generated worlds; a team's own environment is checked on every world it has
        picked = section.oracle_worlds if own is None else None
        checked = [t for t in everything if picked is None or t.world_id in picked]
        if Defect.WRONG_ORACLE in config.defects:
            checked, task_id = with_wrong_oracle(checked)
            log("defect %s: the oracle of %s answers a wrong value", Defect.WRONG_ORACLE.value, task_id)
        variants = config.sandbox.variants
        if Defect.SLOW_TOOL in config.defects:
            variants = (*variants, BadVariant.SLOW_CELL_READ)
            log("defect %s: the gateways serve %s", Defect.SLOW_TOOL.value, BadVariant.SLOW_CELL_READ.value)

        with stage.timed("oracles"):
            scope = StageWork.of(stage).scope  # the build just recorded is where this stage's worlds are
            oracle = derisk_tasks.check_environment_task(scope, checked, section.oracle_transport, variants)
        if broken := derisk_tasks.unusable_own_environment(oracle):
            # nothing would start or answer: the gate fails on the findings, without a base taught on broken tools
            log("policy and base rollouts skipped: %s", broken)
            judge = JudgeSanity(judged=_judged(everything), not_run="the environment's tools are unusable: no answers")
            return stage.finish(derisk_gate(_analyse(stage, oracle, 0, judge), section.thresholds, subset_size))
        with stage.timed("policy"):
            bootstrap = source.bootstrap
            if data != generated:
                bootstrap = bootstrap.model_copy(update={"own_environment": data.resolve()})
            policy = prepare_policy(source.source, generated, bootstrap, source.cache, source.path, source.hub_id)
            stage.output("policy", policy)
        work = StageWork.of(stage)
        settings = work.inputs.policy_settings()
        train, heldout = work.inputs.task_sets(settings)
        engine = work.engine_settings(settings.harness.context_budget_tokens)
        with stage.timed("base_rollouts"):
            job = RolloutJob(Path(policy), train, settings, engine, section.rollout_samples, config.seed)
            derisk_tasks.base_rollouts(work.scope, job, config.sandbox.pool_per_world, variants)
            stage.validate(Suite.TRAJECTORIES)
        with stage.timed("judge_sanity"):
            judged_heldout = [t for t in heldout if t.needs_judge]
            base = EvalJob("judge_sanity", "base", Path(policy), judged_heldout, HarnessKind.MCP, 1, settings, engine)
            judge = _judge_sanity(work, base, _judged(everything))

        measured = _analyse(stage, oracle, len(train), judge)
        return stage.finish(derisk_gate(measured, section.thresholds, subset_size))


@dataclass(frozen=True)
class JudgeSanity:
    judged: int = 0
    """Tasks with an ``llm_judge`` criterion, in the whole environment."""
    audit: JudgeAudit | None = None
    not_run: str = ""


def _judged(tasks: list[TaskSpec]) -> int:
    return sum(task.needs_judge for task in tasks)


def _judge_sanity(work: StageWork, base: EvalJob, judged: int) -> JudgeSanity:
    """The base answers a few of ``base``'s tasks (the judged held-out ones) once, graded by the profile's judge,
    each judgement audited (``envs.judge_audit``): re-judged, and set against an empty answer."""
    stage, samples = work.run, work.run.section.judge_samples
    profile_judge = stage.config.judge
    if not base.tasks:
        return JudgeSanity(judged, not_run="no held-out task has one (train tasks cannot: they are graded without one)")
    if not (profile_judge.url and profile_judge.model):
        return JudgeSanity(judged, not_run="the profile names no judge: set judge.url and judge.model")
    if not samples:
        return JudgeSanity(judged, not_run="derisk.judge_samples is 0")
    result = work.evaluate(replace(base, tasks=list(base.tasks)[:samples]), audit_judge=samples)
    path = result.spec.out_dir / JUDGE_AUDIT_FILE
    if path.is_file():
        audit = JudgeAudit.model_validate_json(path.read_text(encoding="utf-8"))
    else:
        audit = JudgeAudit(model=profile_judge.model)
    atomic_write_json(stage.dir / JUDGE_AUDIT_FILE, audit.model_dump(mode="json"))
    stage.output("judge_audit", stage.dir / JUDGE_AUDIT_FILE)
    log(
        "judge sanity: %d graded samples, %s/%s re-judgements agree, %d empty answers passed",
        len(audit.samples),
        audit.agreements,
        audit.rejudgements,
        audit.empty_passes,
    )
    return JudgeSanity(judged, audit)


def _analyse(stage: StageRun, oracle: dict[str, Any], train_tasks: int, judge: JudgeSanity) -> DeriskMeasured:
    """The catalog's per-tool rates, base rollout errors, reward variance and error signatures: written to the stage
    folder, plotted, recorded as outputs, and returned for the gate."""
    name = stage.stage.value
    stats = derisk_tasks.tool_stats(stage.catalog, name)
    errors = derisk_tasks.rollout_errors(stage.catalog, name)
    variance = derisk_tasks.reward_variance(stage.catalog, name)
    signatures = derisk_tasks.error_signatures(stage.catalog, name)
    mismatches = derisk_tasks.dialect_mismatches(stage.catalog, name)
    varied = [row for row in variance if row["spread"] > 0]
    atomic_write_json(stage.dir / "tool_stats.json", [asdict(s) for s in stats])
    atomic_write_json(stage.dir / "reward_variance.json", variance)
    atomic_write_json(stage.dir / "error_signatures.json", signatures)
    stage.plot(
        "tool failure rates",
        bar_chart(
            stage.dir / "tool_failure_rates.png",
            {s.tool: s.failure_rate or 0.0 for s in stats},
            {s.tool: s.model_failure_rate or 0.0 for s in stats},
            ("known-good calls (oracle, probes)", "base model's calls"),
            "failure rate per tool",
        ),
    )
    stage.output("variance_tasks", [row["task_id"] for row in varied])
    stage.output("tool_stats", stage.dir / "tool_stats.json")
    stage.output("reward_variance", stage.dir / "reward_variance.json")
    return DeriskMeasured(
        oracle_solved=oracle["solved"],
        oracle_tasks=oracle["tasks"],
        oracle_failures=[(row["task_id"], row["error"]) for row in oracle["failed"]],
        rollouts=errors["rollouts"],
        infra_rate=errors["infra_rate"] or 0.0,
        tool_stats=stats,
        tasks_with_variance=len(varied),
        dialect_mismatches=mismatches,
        servers=oracle["servers"],
        known_good_probes=oracle["known_good_probes"],
        judged_tasks=judge.judged,
        judge_audit=judge.audit,
        judge_not_run=judge.not_run,
        metrics={
            "oracle_solved": oracle["solved"],
            "oracle_tasks": oracle["tasks"],
            "probe_calls": oracle["probes"],
            **({"mcp_servers": oracle["servers"]} if oracle["servers"] else {}),
            "train_tasks": train_tasks,
            **{f"base_{key}": value for key, value in errors.items()},
            "tasks_with_variance": len(varied),
            "top_error_signatures": signatures[:5],
            "dialect_mismatches": mismatches,
            **({"judge_agreement": judge.audit.agreement} if judge.audit and judge.audit.samples else {}),
        },
    )
