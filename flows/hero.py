"""Stage 6 · hero run: the landed config, fully async, checkpointed and resumable; does it beat the base?

1. The landed arm of the ablations (algorithm changes and context nudge) on the tuned knobs, in the fully-async loop
   (K workers, staleness bound S, in-flight weight sync) over the train tasks, for ``steps`` optimizer steps, with a
   checkpoint every ``checkpoint_every`` steps: a killed run resumes from its newest checkpoint (same fingerprint).
   With ``retention.coef`` > 0, every step also trains on the base's own examples of the transfer suites' formats
   (PPO-ptx, ``trainer.retention``), so RL on the app tools does not wear them away.
2. The base and the final checkpoint each run ``eval_passes`` passes of the held-out set, with the same seeds.
3. Paired bootstrap CI over held-out tasks of the Pass@1 difference (trained − base).

Gate: the CI lies above 0 — the trained policy beats the base beyond noise. Output: the trained policy folder.

    recipe stage hero --run RUN
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from evals.compare import paired_comparison
from evals.types import Metric
from flows.config import StageName
from flows.stage import DEFAULT_RUNS_ROOT, open_stage
from flows.stage_gates import TrainTrend, hero_gate
from flows.stage_work import StageWork
from tasks.evaluation import summary_metrics
from tasks.plots import estimate_bars, reward_curve
from tasks.training import LoopKind, loop_config
from tasks.validation import Suite


@flow(name="hero", log_prints=True)
def hero(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 6 · hero: the landed config, fully async with checkpoints; held-out Pass@1 must beat the base."""
    with open_stage(run, StageName.HERO, Path(runs_root)) as stage:
        work = StageWork.of(stage)
        config, section, setup, inputs = stage.config, stage.section, work.training_setup(), work.inputs
        landed = stage.upstream(StageName.ABLATIONS).outputs["landed"]
        loop = loop_config(
            LoopKind.ASYNC,
            task_ids=[t.task_id for t in setup.train],
            settings=setup.training_settings(landed["context_nudge"]),
            trainer=inputs.tuned_trainer(landed["algorithm"]).model_copy(
                update={"retention": work.retention(section.retention)}
            ),
            prompts_per_step=section.prompts_per_step or config.rollout.prompts_per_step,
            samples_per_prompt=section.samples_per_prompt or config.rollout.samples_per_prompt,
            steps=section.steps,
            seed=config.seed,
            checkpoint_every=section.checkpoint_every,
            max_num_seqs=setup.engine.max_num_seqs,
            workers=int(inputs.knobs["workers"]),
            max_staleness=config.rollout.max_staleness,
            runtime=config.backends.runtime,
        )
        with stage.timed("train"):
            trained = work.train(f"hero-{landed['arm']}", setup.policy, setup.train, loop)
        results = {}
        for label, policy_dir in (("base", setup.policy), ("trained", trained.policy)):
            with stage.timed(f"eval_{label}"):
                job = setup.eval_job("heldout", label, policy_dir, setup.heldout, section.eval_passes)
                results[label] = work.evaluate(job)
        stage.validate(Suite.TRAIN_STEPS, Suite.EVAL_RESULTS)
        comparison = paired_comparison(
            results["base"].trial_results(),
            results["trained"].trial_results(),
            Metric.PASS_AT_1,
            confidence=section.confidence,
        )
        steps = trained.history.steps
        stage.plot(
            "reward curve", reward_curve(stage.dir / "reward_curve.png", steps, f"hero ({landed['arm']}, async)")
        )
        stage.plot(
            "held-out Pass@1",
            estimate_bars(
                stage.dir / "heldout.png",
                {k: (r.summary.pass_at_1.mean, r.summary.pass_at_1.se or 0.0) for k, r in results.items()},
                "held-out Pass@1 (± SE over passes)",
                "base vs trained",
            ),
        )
        stage.output("policy", trained.policy)
        metrics = {
            "arm": landed["arm"],
            "steps": len(steps),
            "train_wall_s": trained.history.wall_s,
            "idle_share": sum(r.wait_s for r in steps) / trained.history.wall_s if trained.history.wall_s else None,
            "pass_at_1_diff": comparison.mean_diff,
            "ci_low": comparison.ci_low,
            "ci_high": comparison.ci_high,
            "verdict": comparison.verdict.value,
            **summary_metrics("base", results["base"]),
            **summary_metrics("trained", results["trained"]),
        }
        if retained := [r.retention_nll for r in steps if r.retention_nll is not None]:
            metrics |= {"retention_nll_first": retained[0], "retention_nll_last": retained[-1]}
        trend = TrainTrend.of([r.reward_mean for r in steps])
        return stage.finish(hero_gate(comparison, len(steps), section.thresholds, metrics, trend))
