"""Stage 3 · systems tune: measure the knobs on the active backend, pick the fastest, check it fits.

1. A one-factor-at-a-time sweep around the profile's knobs (trainer micro-batch token budget and layout, engine
   concurrent sequences, async generation workers): each trial runs the fully-async loop for a few steps on the
   train tasks with reward variance and measures seconds per step, generated tokens/s and the trainer's idle share.
2. The train–inference mismatch: mean |log π_trainer − log μ_engine| of step 1, when both hold the same weights.
3. The sizing plan of the fastest trial's knobs: trainer (weights, gradients, AdamW), engine weights and KV cache.

Gate: mismatch < 0.03, the chosen trial's idle share under its threshold, and the plan within the memory budget.
Output ``knobs``: used by every later stage (engine sequences, trainer budget and layout, async workers).

    recipe stage systems --run RUN
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import flow

from envs.files import atomic_write_json
from envs.harness.policy import PolicyHarness
from envs.types import TaskSpec
from flows.config import Defect, StageName, SystemsStage
from flows.stage import DEFAULT_RUNS_ROOT, StageRun, open_stage
from flows.stage_gates import SystemsMeasured, systems_gate
from flows.stage_work import StageWork
from tasks.artifacts import log, publish_table
from tasks.plots import bar_chart
from tasks.systems import Knobs, TrialMetrics, one_factor_trials, plan, sweep_trial
from tasks.training import LoopKind, loop_config
from tasks.validation import Suite
from trainer.loops import AsyncLoopConfig
from trainer.sizing import LocalPlan

PERTURBED_WEIGHT_NOISE = 0.2
"""The ``perturbed_engine_weights`` defect's noise, relative to each tensor's rms: the engine still writes tool calls
(the smoke trial's reward 0.09), and its logprobs leave the 0.03 mismatch bar by a wide margin on the few trajectories
a smoke trial measures. 0.05 was too close: on the smoke trial's 4 trajectories of a confident base it measured 0.083
with one smoke base and 0.0077 with the next (bootstrap-v7), so the defect passed the gate; 0.1 measured 0.117 and
0.2 measures 0.233 on that base (2026-12-04)."""


@flow(name="systems", log_prints=True)
def systems(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 3 · systems: a measured knob sweep, the train–inference mismatch, and the sizing plan."""
    with open_stage(run, StageName.SYSTEMS, Path(runs_root)) as stage:
        config, section = stage.config, stage.section
        work = StageWork.of(stage)
        inputs = work.inputs
        policy, settings = Path(inputs.base_policy()), inputs.policy_settings()
        train_tasks, _ = inputs.task_sets(settings)
        tasks = inputs.variance_tasks(train_tasks)
        baseline = Knobs(
            config.trainer.token_budget, config.engine.max_num_seqs, config.rollout.workers, config.trainer.layout
        )
        loop = _trial_loop(stage, settings, tasks)
        results = []
        with stage.timed("sweep"):
            runner = work.runner()
            for index, knobs in enumerate(one_factor_trials(baseline, **section.sweep.model_dump())):
                job = work.train_job(f"trial-{index}-{knobs.label()}", policy, tasks, knobs.apply(loop))
                results.append(sweep_trial(work.scope, knobs, job, runner))
        stage.validate(Suite.TRAIN_STEPS)
        chosen = max(results, key=lambda r: r.tokens_per_s)
        sizing = _sizing(stage, policy, settings, chosen.knobs)
        rows = [r.row() | {"chosen": r is chosen} for r in results]
        atomic_write_json(stage.dir / "sweep.json", rows)
        atomic_write_json(stage.dir / "plan.json", asdict(sizing) | {"total_bytes": sizing.total_bytes})
        publish_table(stage.stage.folder, "sweep", rows, "one trial per knob setting; the fastest is chosen")
        stage.plot(
            "sweep throughput",
            bar_chart(
                stage.dir / "sweep.png",
                {r.knobs.label(): r.idle_share for r in results},
                None,
                ("trainer idle share",),
                "trainer idle share per trial (chosen: most tokens/s)",
            ),
        )
        stage.output("knobs", asdict(chosen.knobs) | {"layout": chosen.knobs.layout.value})
        stage.output("plan", stage.dir / "plan.json")
        metrics = _metrics(results, chosen, sizing)
        mismatch, label = results[0].logprob_mismatch, chosen.knobs.label()
        measured = SystemsMeasured(mismatch, chosen.idle_share, sizing.total_bytes, label, metrics)
        return stage.finish(systems_gate(measured, section.thresholds))


def _trial_loop(stage: StageRun, settings: PolicyHarness, tasks: list[TaskSpec]) -> AsyncLoopConfig:
    """The fully-async loop every trial runs, before its knobs are applied (``Knobs.apply``)."""
    config, section = stage.config, stage.section
    assert isinstance(section, SystemsStage)
    loop = loop_config(
        LoopKind.ASYNC,
        task_ids=[t.task_id for t in tasks],
        settings=settings,
        trainer=config.trainer,
        prompts_per_step=section.prompts_per_step,
        samples_per_prompt=section.samples_per_prompt,
        steps=section.steps_per_trial,
        seed=config.seed,
        checkpoint_every=0,
        max_num_seqs=config.engine.max_num_seqs,
        workers=config.rollout.workers,
        max_staleness=config.rollout.max_staleness,
    )
    assert isinstance(loop, AsyncLoopConfig)
    if Defect.PERTURBED_ENGINE_WEIGHTS in config.defects:
        log("defect %s: the engine serves the policy plus noise", Defect.PERTURBED_ENGINE_WEIGHTS.value)
        return loop.model_copy(update={"engine_weight_noise": PERTURBED_WEIGHT_NOISE})
    return loop


def _sizing(stage: StageRun, policy: Path, settings: PolicyHarness, knobs: Knobs) -> LocalPlan:
    """The sizing plan of ``knobs``, for trajectories as long as the de-risk stage's base rollouts were on average."""
    config, budget = stage.config, settings.harness.context_budget_tokens
    [trajectory] = stage.catalog.query(
        "SELECT avg(n_tokens) AS mean FROM trajectories WHERE stage = 'derisk' AND source = 'base-rollouts'"
    )
    rollout = config.rollout
    tokens = int(trajectory["mean"] or budget)
    return plan(
        policy, knobs, budget, tokens, rollout.max_staleness, rollout.prompts_per_step, rollout.samples_per_prompt
    )


def _metrics(results: list[TrialMetrics], chosen: TrialMetrics, sizing: LocalPlan) -> dict[str, Any]:
    baseline = results[0]
    return {
        "trials": len(results),
        "chosen": chosen.knobs.label(),
        "chosen_tokens_per_s": chosen.tokens_per_s,
        "chosen_step_s": chosen.step_s,
        "baseline_tokens_per_s": baseline.tokens_per_s,
        "speedup_vs_baseline": chosen.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s else None,
        "logprob_mismatch": baseline.logprob_mismatch,
        "plan_total_gib": sizing.total_bytes / 2**30,
        "plan_concurrency": sizing.concurrency,
        "kv_bytes_per_token": sizing.kv_bytes_per_token,
    }
