"""The eval runner: every (task, pass) trial of a task set, one rollout each, through one agent harness.

``run_eval(spec)`` loads the tasks (``evals.sources``), resolves the policy's harness settings
(``evals.resolved_harness``), opens the harness's environments (``evals.harnesses``), and runs ``spec.passes``
rollouts of every task against an OpenAI-compatible engine (``CompletionsClient``), at most ``spec.concurrency`` at a
time. What it writes under ``spec.out_dir`` — the spec, the trial and trajectory logs, ``eval.json`` — is described
in ``evals.run_folder``; the records themselves in ``evals.records``.

Configuration errors are checked before any trial (``evals.preflight``), each an ``EvalConfigError`` (a
``RecipeError``: the CLI prints it as one line). An engine that refuses a request during the run (HTTP 4xx, a reply
off the wire format: ``EngineRejected``) stops the eval at once with its reply, also as an ``EvalConfigError``; the
finished trials stay for a resume.

Resume: a rerun skips the trials already in ``trials.jsonl``, so a killed run completes only the rest. Infra failures
(``ErrorClass.RETRYABLE_INFRA``: engine down, sandbox setup) are re-run up to ``spec.infra_retries`` times, then
recorded as failed (reward 0) with their class, so the summary still covers every (task, pass) and
``EvalResult.counts`` says how many failed for infra.

Each trial is a ``run_group(..., n=1)`` with group id ``<task_id>/pass<p>``; with a sampling seed set, each (task,
pass) samples with its own seed (``trial_seed``) so passes differ, tasks are independent draws, and reruns repeat.

Example::

    spec = EvalSpec(tasks=TaskSource(kind="data", path=Path("data"), split="heldout"), harness="mcp",
                    engine=EngineSpec(base_url="http://127.0.0.1:8000", model="policy", tokenizer="runs/x/policy"),
                    passes=3, out_dir=Path("runs/evals/heldout"))
    result = run_eval(spec)      # result.summary.pass_at_1.mean ± result.summary.pass_at_1.se
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from envs.harness.agent import AgentSetup, EnvsForTask, run_group
from envs.harness.engine_client import CompletionsClient, EngineRejected
from envs.tokens import bearer_keys
from envs.types import ErrorClass, TaskSpec, Trajectory
from evals.errors import EvalConfigError
from evals.harnesses import HARNESSES
from evals.preflight import check_engine, check_first_prompt, check_judge, load_tokenizer
from evals.records import EvalResult, EvalTimings, Progress, ProgressFn, TrialRecord
from evals.resolved_harness import ResolvedHarness, resolve_harness
from evals.run_folder import TRIALS_FILE, TrialLog, prepare_out_dir, write_result
from evals.seeds import trial_seed
from evals.spec import EvalSpec
from evals.stats import summarize


@dataclass(frozen=True)
class EvalPlan:
    """What one invocation of an eval runs: its tasks, its harness, the trials a previous run finished, the rest."""

    spec: EvalSpec
    harness: ResolvedHarness
    tasks: list[TaskSpec]
    finished: list[TrialRecord]
    todo: list[tuple[TaskSpec, int]]

    @property
    def total(self) -> int:
        return len(self.tasks) * self.spec.passes


def plan_eval(spec: EvalSpec) -> EvalPlan:
    """Load the tasks, resolve the harness, open the output folder, and split the trials into finished and to do."""
    tasks = spec.tasks.load()
    duplicates = [task_id for task_id, n in Counter(t.task_id for t in tasks).items() if n > 1]
    if duplicates:
        raise EvalConfigError(f"task ids occur more than once in the source: {', '.join(sorted(duplicates)[:5])}")
    harness = resolve_harness(spec)
    finished = prepare_out_dir(spec, harness)
    planned = {(task.task_id, p) for task in tasks for p in range(spec.passes)}
    stray = [record.key for record in finished if record.key not in planned]
    if stray:
        raise EvalConfigError(f"{spec.out_dir / TRIALS_FILE} holds trials this spec does not plan, e.g. {stray[0]}")
    done_keys = {record.key for record in finished}
    todo = [(task, p) for p in range(spec.passes) for task in tasks if (task.task_id, p) not in done_keys]
    return EvalPlan(spec, harness, tasks, finished, todo)


def _trial_agent(agent: AgentSetup, task_id: str, pass_index: int) -> AgentSetup:
    seed = trial_seed(agent.config.seed, task_id, pass_index)
    return agent if seed is None else agent.with_config(seed=seed)


@dataclass(frozen=True)
class _Trials:
    """What every trial of one run shares: the plan, the opened environments, and the agent (engine, tokenizer, the
    resolved harness settings and the harness's name)."""

    plan: EvalPlan
    envs_for: EnvsForTask
    agent: AgentSetup

    async def run(self, task: TaskSpec, pass_index: int) -> tuple[TrialRecord, Trajectory]:
        """One trial, its infra failures re-run at most ``infra_retries`` times."""
        spec, agent = self.plan.spec, _trial_agent(self.agent, task.task_id, pass_index)
        started = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            (trajectory,) = await run_group(
                task, self.envs_for(task), agent, group_id=f"{task.task_id}/pass{pass_index}", n=1
            )
            if trajectory.error_class is not ErrorClass.RETRYABLE_INFRA or attempts > spec.infra_retries:
                break
        wall = time.perf_counter() - started
        return TrialRecord.from_trajectory(task, pass_index, trajectory, attempts, wall), trajectory


async def _run_trials(plan: EvalPlan, tokenizer: Any, on_record: Callable[[TrialRecord, Trajectory], None]) -> None:
    spec = plan.spec
    gate = asyncio.Semaphore(spec.concurrency)
    async with contextlib.AsyncExitStack() as stack:
        envs_for = await HARNESSES[spec.harness](spec, plan.harness.settings.apps, plan.tasks, stack)
        await check_first_prompt(plan.todo[0][0], envs_for, tokenizer, plan.harness)
        engine = await stack.enter_async_context(
            CompletionsClient(
                spec.engine.base_url,
                spec.engine.model,
                timeout_s=spec.engine.timeout_s,
                keys=bearer_keys(spec.engine.api_key_file),
            )
        )
        agent = AgentSetup(engine, tokenizer, plan.harness.settings.harness, spec.harness.value)
        trials = _Trials(plan, envs_for, agent)

        async def trial(task: TaskSpec, pass_index: int) -> None:
            async with gate:
                on_record(*await trials.run(task, pass_index))

        async with asyncio.TaskGroup() as group:
            for task, pass_index in plan.todo:
                group.create_task(trial(task, pass_index))


def _run_todo(plan: EvalPlan, tokenizer: Any, records: list[TrialRecord], progress: ProgressFn | None) -> None:
    """Run the trials still to do, each logged (and added to ``records``) as it finishes."""
    spec = plan.spec
    with TrialLog(spec.out_dir) as log:

        def on_record(record: TrialRecord, trajectory: Trajectory) -> None:
            log.append(record, trajectory)
            records.append(record)
            if progress:
                progress(Progress(done=len(records), total=plan.total, resumed=len(plan.finished), record=record))

        try:
            asyncio.run(_run_trials(plan, tokenizer, on_record))
        except* EngineRejected as rejected:
            raise EvalConfigError(
                f"the engine at {spec.engine.base_url} rejected a request for {spec.engine.model!r}, so the eval "
                f"stopped (nothing retried; finished trials are kept for a rerun): {rejected.exceptions[0]}. "
                f"Check the harness settings, from {plan.harness.origin()}, against what the engine serves"
            ) from None


def _counts(records: Sequence[TrialRecord]) -> dict[str, dict[str, int]]:
    return {
        "stop_reason": dict(Counter(r.stop_reason.value for r in records)),
        "error_class": dict(Counter(r.error_class.value if r.error_class else "none" for r in records)),
    }


def _result(plan: EvalPlan, records: list[TrialRecord], started_at: datetime, started: float) -> EvalResult:
    done_keys = {record.key for record in plan.finished}
    run_now = [r for r in records if r.key not in done_keys]
    return EvalResult(
        spec=plan.spec,
        summary=summarize([r.trial_result() for r in records]),
        counts=_counts(records),
        timings=EvalTimings(
            started_at=started_at.isoformat(timespec="seconds"),
            finished_at=datetime.now(UTC).isoformat(timespec="seconds"),
            wall_s=time.perf_counter() - started,
            trials_run=len(run_now),
            trials_resumed=len(plan.finished),
            mean_trial_wall_s=sum(r.wall_s for r in records) / len(records),
        ),
        harness=plan.harness.settings,
        harness_source=plan.harness.source,
        trials=sorted(records, key=lambda r: r.key),
    )


def run_eval(spec: EvalSpec, progress: ProgressFn | None = None, tokenizer: Any = None) -> EvalResult:
    """Run (or resume) the eval ``spec`` and return its result; see ``evals.run_folder`` for what is written.

    ``tokenizer`` defaults to ``load_tokenizer(spec.engine)``; ``progress`` is called once before the first trial
    and after every finished one. Raises ``EvalConfigError`` for an eval that cannot run as configured — before any
    trial where it can be seen up front, else at the engine's first refusal.
    """
    started_at, started = datetime.now(UTC), time.perf_counter()
    plan = plan_eval(spec)
    records = list(plan.finished)
    if plan.todo:  # the engine before the tokenizer: a model name it does not serve explains a tokenizer that fails
        check_judge(spec, plan.tasks)
        check_engine(spec, plan.harness)
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(spec.engine)
    if progress:
        progress(Progress(done=len(records), total=plan.total, resumed=len(plan.finished), record=None))
    if plan.todo:
        _run_todo(plan, tokenizer, records, progress)
    result = _result(plan, records, started_at, started)
    write_result(result)
    return result
