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

from prefect import flow

from envs.files import atomic_write_json
from flows.config import StageName
from flows.stage import DEFAULT_RUNS_ROOT, open_stage
from flows.stage_gates import systems_gate
from tasks.artifacts import publish_table
from tasks.plots import bar_chart
from tasks.systems import Knobs, one_factor_trials, plan, sweep_trial
from tasks.validation import Suite, validate


@flow(name="systems", log_prints=True)
def systems(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 3 · systems: a measured knob sweep, the train–inference mismatch, and the sizing plan."""
    with open_stage(run, StageName.SYSTEMS, Path(runs_root)) as stage:
        config, section = stage.config, stage.section
        policy, settings = Path(stage.policy()), stage.policy_settings()
        train_tasks, _ = stage.task_sets(settings)
        varied = set(stage.upstream(StageName.DERISK).outputs["variance_tasks"])
        tasks = [t for t in train_tasks if t.task_id in varied] or train_tasks
        baseline = Knobs(
            config.trainer.token_budget, config.engine.max_num_seqs, config.rollout.workers, config.trainer.layout
        )
        trials = one_factor_trials(baseline, **section.sweep.model_dump())
        results = []
        with stage.timed("sweep"):
            for index, knobs in enumerate(trials):
                results.append(
                    sweep_trial(
                        stage.catalog,
                        stage.stage.value,
                        knobs,
                        policy,
                        tasks,
                        config.environment.data / "worlds",
                        settings,
                        config.trainer,
                        section.prompts_per_step,
                        section.samples_per_prompt,
                        section.steps_per_trial,
                        config.rollout.max_staleness,
                        config.seed,
                        stage.work_dir(
                            f"trial-{index}",
                            [knobs.label(), config.trainer.model_dump(mode="json"), section.model_dump(mode="json")],
                        ),
                        stage.stage.folder,
                    )
                )
        validate(Suite.TRAIN_STEPS, stage.catalog.frame("SELECT * FROM train_steps WHERE stage = ?", ["systems"]))
        chosen = max(results, key=lambda r: r.tokens_per_s)
        [trajectory] = stage.catalog.query(
            "SELECT avg(n_tokens) AS mean FROM trajectories WHERE stage = 'derisk' AND source = 'base-rollouts'"
        )
        sizing = plan(
            policy,
            chosen.knobs,
            settings.harness.context_budget_tokens,
            int(trajectory["mean"] or settings.harness.context_budget_tokens),
            config.rollout.max_staleness,
            config.rollout.prompts_per_step,
            config.rollout.samples_per_prompt,
        )
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
        mismatch = results[0].logprob_mismatch
        metrics = {
            "trials": len(results),
            "chosen": chosen.knobs.label(),
            "chosen_tokens_per_s": chosen.tokens_per_s,
            "chosen_step_s": chosen.step_s,
            "baseline_tokens_per_s": results[0].tokens_per_s,
            "speedup_vs_baseline": chosen.tokens_per_s / results[0].tokens_per_s if results[0].tokens_per_s else None,
            "logprob_mismatch": mismatch,
            "plan_total_gib": sizing.total_bytes / 2**30,
            "plan_concurrency": sizing.concurrency,
            "kv_bytes_per_token": sizing.kv_bytes_per_token,
        }
        gate = systems_gate(
            mismatch, chosen.idle_share, sizing.total_bytes, section.thresholds, chosen.knobs.label(), metrics
        )
        return stage.finish(gate)
