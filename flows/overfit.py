"""Stage 4 · overfit gate: can the training stack raise the reward on tasks it can learn from? (also the nightly job)

1. The overfit subset: ``subset_size`` train tasks whose base rollouts in the de-risk stage disagreed (non-zero
   reward variance), those with the lowest base reward first (the most room to rise).
2. Before: the base's reward on the subset, ``eval_samples`` fresh rollouts per task (not the de-risk samples that
   chose the subset: those would carry their selection bias).
3. The synchronous loop on the subset with the tuned knobs (the profile's algorithm; RECIPE: batch 32 × 8 samples).
4. After: the final checkpoint on the subset, the same way.

Gate: the subset's mean reward rises by at least ``min_reward_gain`` within ``steps`` steps, and a one-sided paired
t-test over the subset's tasks gives p < ``max_p_value``. Output: the trained policy folder.

    recipe stage overfit --run RUN
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow

from evals.compare import one_sided_paired_test
from evals.records import EvalResult
from evals.types import Metric
from flows.config import StageName
from flows.stage import DEFAULT_RUNS_ROOT, open_stage
from flows.stage_gates import OverfitMeasured, TrainTrend, overfit_gate
from flows.stage_work import StageWork
from tasks.evaluation import summary_metrics
from tasks.plots import reward_curve
from tasks.training import LoopKind, loop_config
from tasks.validation import Suite


@flow(name="overfit", log_prints=True)
def overfit(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 4 · overfit: the synchronous loop on the tasks with reward variance; the reward must rise, p < 0.01."""
    with open_stage(run, StageName.OVERFIT, Path(runs_root)) as stage:
        work = StageWork.of(stage)
        config, section, setup = stage.config, stage.section, work.training_setup()
        by_id = {t.task_id: t for t in setup.train}
        variance = json.loads(stage.upstream_path(StageName.DERISK, "reward_variance").read_text())
        # Of the tasks whose base rollouts disagreed, those the base solves least often: the most room to overfit.
        varied = sorted((row for row in variance if row["spread"] > 0), key=lambda r: (r["mean_reward"], r["task_id"]))
        subset = [by_id[row["task_id"]] for row in varied if row["task_id"] in by_id][: section.subset_size]

        def subset_eval(label: str, policy_dir: Path) -> EvalResult:
            return work.evaluate(setup.eval_job("subset", label, policy_dir, subset, section.eval_samples))

        with stage.timed("before"):
            before = subset_eval("base", setup.policy)
        loop = loop_config(
            LoopKind.SYNC,
            task_ids=[t.task_id for t in subset],
            settings=setup.settings,
            trainer=work.inputs.tuned_trainer(),
            prompts_per_step=section.prompts_per_step,
            samples_per_prompt=section.samples_per_prompt,
            steps=section.steps,
            seed=config.seed,
            checkpoint_every=config.rollout.checkpoint_every,
            max_num_seqs=setup.engine.max_num_seqs,
        )
        with stage.timed("train"):
            trained = work.train("overfit", setup.policy, subset, loop)
        with stage.timed("after"):
            after = subset_eval("trained", trained.policy)
        stage.validate(Suite.TRAIN_STEPS, Suite.EVAL_RESULTS)

        gain, p_value = one_sided_paired_test(before.trial_results(), after.trial_results(), Metric.MEAN_REWARD)
        steps = trained.history.steps
        stage.plot(
            "reward curve", reward_curve(stage.dir / "reward_curve.png", steps, f"overfit subset ({len(subset)} tasks)")
        )
        stage.output("policy", trained.policy)
        stage.output("subset", [t.task_id for t in subset])
        metrics = {
            "subset_tasks": len(subset),
            "steps": len(steps),
            "reward_before": before.summary.mean_reward.mean,
            "reward_after": after.summary.mean_reward.mean,
            "gain": gain,
            "p_value": p_value,
            "train_wall_s": trained.history.wall_s,
            **summary_metrics("before", before),
            **summary_metrics("after", after),
        }
        before_mean, after_mean = before.summary.mean_reward.mean, after.summary.mean_reward.mean
        trend = TrainTrend.of([r.reward_mean for r in steps])
        measured = OverfitMeasured(before_mean, after_mean, gain, p_value, len(steps), metrics, trend)
        return stage.finish(overfit_gate(measured, section.thresholds))
