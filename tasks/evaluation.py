"""Eval tasks: every eval of the pipeline goes through ``evals.runner`` against an engine's HTTP API.

One code path for the overfit subset, the ablation arms, the hero run and the transfer suites: the policy is served
on loopback by our engine (or reached at the run's vLLM URL), ``run_eval`` runs ``passes`` trials per task with
retries of infra failures and a resumable trial log, and its trials and trajectories land in the catalog
(``evals``, ``trajectories``) under the stage, the suite and the policy's label.

    result = evaluate(catalog, "hero", "heldout", "trained", policy_dir, tasks, worlds, HarnessKind.MCP, passes=4, ...)
    trials = result.trial_results()      # → evals.compare.paired_comparison(base_trials, trials)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.harness.policy import PolicyHarness
from envs.jsonio import json_lines
from envs.loaders import save_jsonl
from envs.types import TaskSpec, Trajectory
from evals.runner import (
    TRAJECTORIES_FILE,
    EngineSpec,
    EvalResult,
    EvalSpec,
    HarnessKind,
    HarnessOverrides,
    McpBackend,
    SourceKind,
    TaskSource,
    run_eval,
)
from tasks.artifacts import ProgressArtifact, log
from tasks.catalog import Catalog
from tasks.engine import EngineSettings, policy_endpoint


def _overrides(settings: PolicyHarness, seed: int) -> HarnessOverrides:
    """The run's harness as eval overrides (on top of the policy's harness.json, which the runner reads too)."""
    h = settings.harness
    return HarnessOverrides(
        temperature=h.temperature,
        max_turns=h.max_turns,
        max_tokens_per_turn=h.max_tokens_per_turn,
        context_budget_tokens=h.context_budget_tokens,
        agent_timeout_s=h.agent_timeout_s,
        seed=seed,
    )


def _record(
    catalog: Catalog, stage: str, suite: str, label: str, result: EvalResult, tasks: Sequence[TaskSpec]
) -> None:
    catalog.append(
        "evals",
        [
            {"stage": stage, "suite": suite, "policy": label, "task_id": r.task_id, "pass_index": r.pass_index}
            | {"harness": r.harness, "domain": r.domain, "tier": r.tier, "reward": r.reward, "passed": r.passed}
            | {"stop_reason": str(r.stop_reason), "error_class": str(r.error_class) if r.error_class else None}
            for r in result.trials
        ],
    )
    path = result.spec.out_dir / TRAJECTORIES_FILE
    lines = json_lines(path.read_text(encoding="utf-8"))
    trajectories = [Trajectory.model_validate(json.loads(line)["trajectory"]) for _, line in lines]
    catalog.add_trajectories(stage, f"eval/{suite}", label, trajectories, {t.task_id: t for t in tasks})


@task(name="eval", cache_policy=NO_CACHE, task_run_name="eval-{suite}-{label}")
def evaluate(
    catalog: Catalog,
    stage: str,
    suite: str,
    label: str,
    policy_dir: Path,
    tasks: Sequence[TaskSpec] | None,
    worlds_root: Path | None,
    harness: HarnessKind,
    passes: int,
    settings: PolicyHarness,
    engine: EngineSettings,
    out_dir: Path,
    seed: int,
    mcp_backend: McpBackend = McpBackend.IN_PROCESS,
    concurrency: int = 32,
) -> EvalResult:
    """``passes`` trials of every task of ``tasks`` (None: the bundled terminal tasks) by the policy ``policy_dir``."""
    if tasks is None:
        source = TaskSource(kind=SourceKind.BUNDLED_TERMINAL)
    else:
        save_jsonl(list(tasks), out_dir / "tasks.jsonl")
        source = TaskSource(kind=SourceKind.JSONL, path=out_dir / "tasks.jsonl", worlds=worlds_root)
    with policy_endpoint(policy_dir, engine, name=label) as endpoint:
        spec = EvalSpec(
            tasks=source,
            harness=harness,
            engine=EngineSpec(base_url=endpoint.url, model=endpoint.model, tokenizer=endpoint.tokenizer),
            passes=passes,
            out_dir=out_dir,
            concurrency=concurrency,
            harness_config=_overrides(settings, seed),
            policy=policy_dir if (policy_dir / "harness.json").is_file() else None,
            mcp_backend=mcp_backend,
        )
        total = passes * (len(tasks) if tasks is not None else len(source.load()))
        with ProgressArtifact(out_dir.parent.name, f"eval-{suite}-{label}", total=total) as progress:
            result = run_eval(spec, progress=lambda p: progress.advance(by=0 if p.record is None else 1))
    _record(catalog, stage, suite, label, result, source.load() if tasks is None else tasks)
    s = result.summary
    log(
        "eval %s/%s: Pass@1 %.3f ± %.3f, mean reward %.3f over %d tasks × %d passes",
        suite,
        label,
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
def mcq(catalog: Catalog, stage: str, label: str, policy_dir: Path, engine: EngineSettings, passes: int, seed: int):
    """The bundled GPQA/HLE-style multiple-choice suite through the chat API, ``passes`` sampled passes."""
    from evals.mcq import BUNDLED_MCQ, McqApi, load_mcq, run_mcq

    with policy_endpoint(policy_dir, engine, name=label) as endpoint:
        result = run_mcq(
            load_mcq(BUNDLED_MCQ), endpoint.url, endpoint.model, passes, temperature=1.0, api=McqApi.CHAT, seed=seed
        )
    catalog.append(
        "evals",
        [
            {"stage": stage, "suite": "mcq", "policy": label, "task_id": t.task_id, "pass_index": t.pass_index}
            | {"harness": "mcq", "domain": t.domain, "reward": t.reward, "passed": t.passed}
            for t in result.trial_results()
        ],
    )
    log("mcq/%s: accuracy %.3f over %d questions × %d passes", label, result.accuracy.mean, result.n_questions, passes)
    return result
