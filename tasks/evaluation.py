"""Eval tasks: every eval of the pipeline goes through ``evals.runner`` against an engine's HTTP API.

One code path for the overfit subset, the ablation arms, the hero run and the transfer suites: the policy is served
on loopback by our engine (or reached at the run's vLLM URL), ``run_eval`` runs ``passes`` trials per task with
retries of infra failures and a resumable trial log, and its trials and trajectories land in the catalog
(``evals``, ``trajectories``) under the stage, the suite and the policy's label.

    job = EvalJob("heldout", "trained", policy_dir, tasks, HarnessKind.MCP, 4, settings, engine)
    result = evaluate(scope, job, out_dir, seed)
    trials = result.trial_results()      # → evals.compare.paired_comparison(base_trials, trials)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.harness.policy import HARNESS_FILE, PolicyHarness
from envs.jsonio import json_lines
from envs.loaders import save_jsonl
from envs.types import TaskSpec, Trajectory
from evals.records import EvalResult
from evals.run_folder import TRAJECTORIES_FILE
from evals.runner import run_eval
from evals.sources import SourceKind, TaskSource
from evals.spec import SEEDING, EngineSpec, EvalSpec, HarnessKind, HarnessOverrides, JudgeSpec, McpBackend
from tasks.artifacts import ProgressArtifact, log
from tasks.context import StageScope
from tasks.engine import EngineSettings, policy_endpoint
from tasks.run_store import eval_folder_stem


@dataclass(frozen=True)
class EvalJob:
    """One eval of the pipeline: ``passes`` trials of every task of ``tasks`` (None: the bundled terminal tasks) by
    the policy ``policy_dir`` with the run's harness ``settings``, through ``harness``, recorded as ``suite`` /
    ``label``."""

    suite: str
    label: str
    policy_dir: Path
    tasks: Sequence[TaskSpec] | None
    harness: HarnessKind
    passes: int
    settings: PolicyHarness
    engine: EngineSettings
    mcp_backend: McpBackend = McpBackend.IN_PROCESS
    concurrency: int = 32
    judge: JudgeSpec | None = None

    def inputs(self) -> list[Any]:
        """What the eval's trials depend on: its work folder is keyed by these, so a rerun resumes its trials."""
        tasks = [t.task_id for t in self.tasks or []]
        settings = self.settings.model_dump(mode="json")
        return [str(self.policy_dir), tasks, str(self.harness), self.passes, settings, SEEDING]


def _record(scope: StageScope, job: EvalJob, result: EvalResult, tasks: Sequence[TaskSpec]) -> None:
    scope.catalog.append(
        "evals",
        [
            {"stage": scope.stage, "suite": job.suite, "policy": job.label, "task_id": r.task_id}
            | {"pass_index": r.pass_index, "harness": r.harness, "domain": r.domain, "tier": r.tier}
            | {"reward": r.reward, "passed": r.passed, "stop_reason": str(r.stop_reason)}
            | {"error_class": str(r.error_class) if r.error_class else None}
            for r in result.trials
        ],
    )
    path = result.spec.out_dir / TRAJECTORIES_FILE
    lines = json_lines(path.read_text(encoding="utf-8"))
    trajectories = [Trajectory.model_validate(json.loads(line)["trajectory"]) for _, line in lines]
    scope.catalog.add_trajectories(
        scope.stage, f"eval/{job.suite}", job.label, trajectories, {t.task_id: t for t in tasks}
    )


def _task_source(job: EvalJob, out_dir: Path, worlds_root: Path) -> TaskSource:
    """The job's tasks as an eval source: written next to its trials, or the bundled terminal tasks."""
    if job.tasks is None:
        return TaskSource(kind=SourceKind.BUNDLED_TERMINAL)
    save_jsonl(list(job.tasks), out_dir / "tasks.jsonl")
    return TaskSource(kind=SourceKind.JSONL, path=out_dir / "tasks.jsonl", worlds=worlds_root)


@task(name="eval", cache_policy=NO_CACHE, task_run_name="eval-{job.suite}-{job.label}")
def evaluate(scope: StageScope, job: EvalJob, out_dir: Path, seed: int) -> EvalResult:
    """``job``'s trials into ``out_dir`` (resumed when it holds some), sampling with ``seed``; into the catalog."""
    source = _task_source(job, out_dir, scope.worlds)
    tasks = source.load() if job.tasks is None else job.tasks
    policy_dir = job.policy_dir
    with policy_endpoint(policy_dir, job.engine, name=job.label) as endpoint:
        spec = EvalSpec(
            tasks=source,
            harness=job.harness,
            engine=EngineSpec(
                base_url=endpoint.url,
                model=endpoint.model,
                tokenizer=endpoint.tokenizer,
                api_key_file=endpoint.api_key_file,
            ),
            passes=job.passes,
            out_dir=out_dir,
            concurrency=job.concurrency,
            harness_config=HarnessOverrides.of(job.settings.harness.model_copy(update={"seed": seed})),
            policy=policy_dir if (policy_dir / HARNESS_FILE).is_file() else None,
            mcp_backend=job.mcp_backend,
            judge=job.judge,
        )
        key = eval_folder_stem(job.suite, job.label)
        with ProgressArtifact(out_dir.parent.name, key, total=job.passes * len(tasks)) as progress:
            result = run_eval(spec, progress=lambda p: progress.advance(by=0 if p.record is None else 1))
    _record(scope, job, result, tasks)
    s = result.summary
    log(
        "eval %s/%s: Pass@1 %.3f ± %.3f, mean reward %.3f over %d tasks × %d passes",
        job.suite,
        job.label,
        s.pass_at_1.mean,
        s.pass_at_1.se or 0.0,
        s.mean_reward.mean,
        s.n_tasks,
        s.n_passes,
    )
    return result


def summary_metrics(prefix: str, result: EvalResult) -> dict[str, Any]:
    s = result.summary
    return {
        f"{prefix}_pass_at_1": s.pass_at_1.mean,
        f"{prefix}_pass_at_1_se": s.pass_at_1.se,
        f"{prefix}_mean_reward": s.mean_reward.mean,
        f"{prefix}_trials": s.n_tasks * s.n_passes,
        f"{prefix}_infra_failures": result.counts["error_class"].get("retryable_infra", 0),
    }


@task(name="mcq", cache_policy=NO_CACHE, task_run_name="mcq-{label}")
def mcq(scope: StageScope, label: str, policy_dir: Path, engine: EngineSettings, passes: int, seed: int):
    """The bundled GPQA/HLE-style multiple-choice suite through the chat API, ``passes`` sampled passes."""
    from evals.mcq import BUNDLED_MCQ, McqApi, McqConfig, load_mcq, run_mcq

    with policy_endpoint(policy_dir, engine, name=label) as endpoint:
        config = McqConfig(
            endpoint.url, endpoint.model, passes, api=McqApi.CHAT, seed=seed, api_key_file=endpoint.api_key_file
        )
        result = run_mcq(load_mcq(BUNDLED_MCQ), config)
    scope.catalog.append(
        "evals",
        [
            {"stage": scope.stage, "suite": "mcq", "policy": label, "task_id": t.task_id, "pass_index": t.pass_index}
            | {"harness": "mcq", "domain": t.domain, "reward": t.reward, "passed": t.passed}
            for t in result.trial_results()
        ],
    )
    log("mcq/%s: accuracy %.3f over %d questions × %d passes", label, result.accuracy.mean, result.n_questions, passes)
    return result
