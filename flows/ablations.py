"""Stage 5 · ablations: which of the recipe's knobs help here, measured against a baseline beyond noise.

1. Every arm (default: the recipe's grid — baseline token_mean + GLM-5 loss, prompt_mean, context nudge, DPPO,
   DPPO + prompt_mean + nudge, + overlong filtering, + adaptive length penalty) trains from the same base with the
   same seed and task stream, for the same steps, with the tuned knobs.
2. Each arm's final checkpoint runs ``eval_passes`` passes of the held-out set (evals run without the nudge).
3. Each arm vs the baseline: paired bootstrap CI of the per-task mean-reward difference, and a verdict (gain /
   within noise / loss).
4. The landed config, by the rule in ``flows.stage_gates.landed_arm``: the largest gain beyond noise; with none, the
   recipe's landed arm unless it is a loss; else the baseline.

Gate: every arm finished and the rule chose. Output ``landed``: the arm's algorithm changes and nudge, for the hero.

    recipe stage ablations --run RUN
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from envs.files import atomic_write_json
from envs.types import TaskSpec
from evals.compare import paired_comparison
from evals.records import EvalResult
from evals.types import Metric
from flows.config import AblationsStage, StageName
from flows.stage import DEFAULT_RUNS_ROOT, StageRun, TrainingSetup, open_stage
from flows.stage_gates import ArmResult, ablations_gate, landed_arm
from tasks.artifacts import log, publish_table
from tasks.plots import estimate_bars
from tasks.training import LoopKind, loop_config
from tasks.validation import Suite


@flow(name="ablations", log_prints=True)
def ablations(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 5 · ablations: the recipe's arms from one base and seed, k-pass held-out evals, paired CIs, a verdict."""
    with open_stage(run, StageName.ABLATIONS, Path(runs_root)) as stage:
        section: AblationsStage = stage.section
        setup = stage.training_setup()
        tasks = stage.variance_tasks(setup.train)
        evals, errors = {}, {}
        for arm_name in section.arms:
            try:
                with stage.timed(f"arm_{arm_name}"):
                    evals[arm_name] = _run_arm(stage, setup, tasks, arm_name)
            except Exception as error:  # one arm's failure is a finding of this stage, not the end of the others
                errors[arm_name] = f"{type(error).__name__}: {error}"
                log("arm %s failed: %s", arm_name, errors[arm_name])
        stage.validate(Suite.EVAL_RESULTS)

        arms = _arm_results(evals, section)
        landed, reason = landed_arm(arms, section.baseline, section.prior)
        table = _table(arms, evals, errors, landed)
        atomic_write_json(stage.dir / "ablations.json", table)
        publish_table(stage.stage.folder, "table", table, f"held-out mean reward per arm vs {section.baseline}")
        stage.plot(
            "ablation bars",
            estimate_bars(
                stage.dir / "ablations.png",
                {a.name: (a.mean or 0.0, a.se or 0.0) for a in arms},
                "held-out mean reward (± SE over passes)",
                f"ablations: {section.steps} steps each; landed {landed}",
            ),
        )
        arm = section.arms[landed]
        stage.output("landed", {"arm": landed, "algorithm": arm.algorithm, "context_nudge": arm.context_nudge})
        stage.output("table", stage.dir / "ablations.json")
        metrics = {"landed": landed, "rule": reason, "arms": table}
        return stage.finish(ablations_gate(arms, landed, reason, metrics))


def _run_arm(stage: StageRun, setup: TrainingSetup, tasks: list[TaskSpec], arm_name: str) -> EvalResult:
    """Train one arm from the base on ``tasks`` (those with reward variance), then evaluate it on the held-out set."""
    section: AblationsStage = stage.section
    arm = section.arms[arm_name]
    loop = loop_config(
        LoopKind.SYNC,
        task_ids=[t.task_id for t in tasks],
        settings=setup.nudged(arm.context_nudge),
        trainer=stage.tuned_trainer(arm.algorithm),
        prompts_per_step=section.prompts_per_step,
        samples_per_prompt=section.samples_per_prompt,
        steps=section.steps,
        seed=stage.config.seed,
        checkpoint_every=0,
        max_num_seqs=setup.engine.max_num_seqs,
    )
    trained = stage.train(arm_name, setup.policy, tasks, loop)
    # Evals run without the nudge: the arm is measured on what its training changed.
    return stage.evaluate(setup.eval_job("heldout", arm_name, trained.policy, setup.heldout, section.eval_passes))


def _arm_results(evals: dict[str, EvalResult], section: AblationsStage) -> list[ArmResult]:
    """Each arm's held-out mean reward, and its paired comparison with the baseline (when both finished)."""
    baseline = evals.get(section.baseline)
    arms = []
    for arm_name in section.arms:
        result = evals.get(arm_name)
        comparison = None
        if result is not None and baseline is not None and arm_name != section.baseline:
            comparison = paired_comparison(
                baseline.trial_results(), result.trial_results(), Metric.MEAN_REWARD, confidence=section.confidence
            )
        summary = result.summary if result else None
        mean, se = (summary.mean_reward.mean, summary.mean_reward.se) if summary else (None, None)
        arms.append(ArmResult(arm_name, finished=result is not None, comparison=comparison, mean=mean, se=se))
    return arms


def _table(
    arms: list[ArmResult], evals: dict[str, EvalResult], errors: dict[str, str], landed: str
) -> list[dict[str, Any]]:
    return [
        {
            "arm": a.name,
            "mean_reward": a.mean,
            "se": a.se,
            "pass_at_1": evals[a.name].summary.pass_at_1.mean if a.name in evals else None,
            "delta": a.comparison.mean_diff if a.comparison else 0.0,
            "ci_low": a.comparison.ci_low if a.comparison else None,
            "ci_high": a.comparison.ci_high if a.comparison else None,
            "verdict": a.comparison.verdict.value if a.comparison else ("baseline" if a.finished else "failed"),
            "landed": a.name == landed,
            "error": errors.get(a.name),
        }
        for a in arms
    ]
