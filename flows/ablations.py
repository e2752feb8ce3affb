"""Stage 5 · ablations: which of the recipe's knobs help here, measured against a baseline beyond noise.

1. Every arm (default: the recipe's grid — baseline token_mean + GLM-5 loss, prompt_mean, context nudge, DPPO,
   DPPO + prompt_mean + nudge, + overlong filtering, + adaptive length penalty) trains from the same base with the
   same seed and task stream, for the same steps, with the tuned knobs: synchronously (on-policy), or with
   ``loop: async`` as the hero trains (the run's workers and staleness bound: off-policy, so DPPO's mask can act),
   with the stage's ``harness`` changes (e.g. a context budget some rollouts reach, so the nudge and the overlong
   filter act on short tasks).
2. Each arm's final checkpoint runs ``eval_passes`` passes of the held-out set (evals run without the nudge).
3. Each arm's mechanism activity over its training steps (``trainer.algorithms.activity``, recorded per step in its
   history): nudges inserted, the share of tokens DPPO masked and mean |π/μ − 1|, the share of trajectories the
   overlong filter dropped, the mean length penalty, the token weights' distance from token_mean's. The mechanisms
   an arm turns on relative to the baseline (``flows.mechanisms``) that never acted are idle; an arm none of whose
   mechanisms acted is **inert**: it measures nothing.
4. Each arm vs the baseline: paired bootstrap CI of the per-task mean-reward difference, and a verdict (gain /
   within noise / loss, or inert whatever the CI).
5. The landed config, by the rule in ``flows.stage_gates.landed_arm``: the largest gain beyond noise among arms that
   are not inert; with none, the recipe's landed arm unless it is a loss or inert; else the baseline.

Gate: every arm finished and the rule chose (and, where the profile sets ``thresholds.max_inert_arms``, at most
that many arms are inert); findings give each arm's verdict and its idle mechanisms ("inert:
DPPO never acted (dppo_masked_share = 0)"). Writes ``ablations.json``, one row per arm: score, CI, verdict and the
activity figures. Output ``landed``: the arm's algorithm changes and nudge, for the hero.

    recipe stage ablations --run RUN
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from prefect import flow

from envs.diskspace import no_space
from envs.files import atomic_write_json
from envs.types import TaskSpec
from evals.compare import paired_comparison
from evals.records import EvalResult
from evals.types import Metric
from flows.config import AblationsStage, Defect, StageName
from flows.mechanisms import ArmSetup, arm_mechanisms, idle_mechanisms
from flows.stage import DEFAULT_RUNS_ROOT, open_stage
from flows.stage_gates import ArmResult, ablations_gate, landed_arm
from flows.stage_work import StageWork, TrainingSetup
from tasks.artifacts import log, publish_table
from tasks.plots import estimate_bars
from tasks.training import loop_config
from tasks.validation import Suite
from trainer.algorithms import AlgorithmConfig, MechanismActivity

LOSS_RTOL = 1e-5
"""Two runs of the same computation differ in a loss's 7th digit (threaded float sums); different settings, more."""


@flow(name="ablations", log_prints=True)
def ablations(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 5 · ablations: the recipe's arms from one base and seed, k-pass held-out evals, paired CIs, a verdict."""
    with open_stage(run, StageName.ABLATIONS, Path(runs_root)) as stage:
        section: AblationsStage = stage.section
        work = StageWork.of(stage)
        setup = work.training_setup()
        tasks = work.inputs.variance_tasks(setup.train)
        evals, activities, losses, errors = {}, {}, {}, {}
        for arm_name in section.arms:
            try:
                with stage.timed(f"arm_{arm_name}"):
                    evals[arm_name], activities[arm_name], losses[arm_name] = _run_arm(work, setup, tasks, arm_name)
            except Exception as error:  # one arm's failure is a finding of this stage, not the end of the others
                if no_space(error) is not None:
                    raise  # a full disk is no arm's finding: every later arm would fail alike
                errors[arm_name] = f"{type(error).__name__}: {error}"
                log("arm %s failed: %s", arm_name, errors[arm_name])
        stage.validate(Suite.EVAL_RESULTS)

        setups = _arm_setups(stage.config.trainer.algorithm, section)
        arms = _arm_results(evals, activities, errors, setups, section, _same_as_baseline(losses, section.baseline))
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
        metrics = {"landed": landed, "rule": reason, "inert_arms": sum(a.inert for a in arms), "arms": table}
        return stage.finish(ablations_gate(arms, landed, reason, metrics, section.thresholds))


def _run_arm(
    work: StageWork, setup: TrainingSetup, tasks: list[TaskSpec], arm_name: str
) -> tuple[EvalResult, MechanismActivity | None, tuple[float | None, ...]]:
    """Train one arm from the base on ``tasks`` (those with reward variance), then evaluate it on the held-out set;
    its held-out result, its mechanisms' activity over the training steps and each step's loss."""
    stage, inputs = work.run, work.inputs
    section: AblationsStage = stage.section
    arm = section.arms[arm_name]
    if Defect.IGNORED_ARM_CONFIG in inputs.defects and arm_name == _first_arm_after_baseline(section):
        log("defect %s: arm %s trains with the baseline's settings", Defect.IGNORED_ARM_CONFIG.value, arm_name)
        arm = section.arms[section.baseline]
    rollout = stage.config.rollout
    loop = loop_config(
        section.loop,
        task_ids=[t.task_id for t in tasks],
        settings=setup.training_settings(arm.context_nudge, section.harness),
        trainer=inputs.tuned_trainer(arm.algorithm),
        prompts_per_step=section.prompts_per_step,
        samples_per_prompt=section.samples_per_prompt,
        steps=section.steps,
        seed=stage.config.seed,
        checkpoint_every=0,
        max_num_seqs=setup.engine.max_num_seqs,
        workers=int(inputs.knobs["workers"]),
        max_staleness=rollout.max_staleness,
        runtime=stage.config.backends.runtime,
    )
    if Defect.CRASHING_ARM in inputs.defects and arm_name == _first_arm_after_baseline(section):
        log("defect %s: arm %s crashes at its first step", Defect.CRASHING_ARM.value, arm_name)
        loop = loop.model_copy(update={"crash_at_step": 1})
    trained = work.train(arm_name, setup.policy, tasks, loop)
    # Evals run without the nudge: the arm is measured on what its training changed.
    job = setup.eval_job("heldout", arm_name, trained.policy, setup.heldout, section.eval_passes)
    return work.evaluate(job), trained.history.activity(), tuple(r.loss for r in trained.history.steps)


def _same_as_baseline(losses: dict[str, tuple[float | None, ...]], baseline: str) -> set[str]:
    """The arms whose every step's loss equals the baseline's (to float round-off, ``LOSS_RTOL``): they trained as the
    baseline did (the same seed and task stream), so their settings changed nothing — or never reached the trainer."""
    reference = losses.get(baseline)

    def equal(a: float | None, b: float | None) -> bool:
        return a is b or (a is not None and b is not None and math.isclose(a, b, rel_tol=LOSS_RTOL, abs_tol=1e-9))

    return {
        name
        for name, own in losses.items()
        if name != baseline and reference and len(own) == len(reference) and all(map(equal, own, reference))
    }


def _first_arm_after_baseline(section: AblationsStage) -> str:
    return next(name for name in section.arms if name != section.baseline)


def _arm_setups(profile: AlgorithmConfig, section: AblationsStage) -> dict[str, ArmSetup]:
    """Each arm's whole algorithm (the profile's with the arm's changes, as ``StageInputs.tuned_trainer`` builds it)."""
    return {
        name: ArmSetup(AlgorithmConfig(**profile.model_dump() | arm.algorithm), arm.context_nudge)
        for name, arm in section.arms.items()
    }


def _arm_results(
    evals: dict[str, EvalResult],
    activities: dict[str, MechanismActivity | None],
    errors: dict[str, str],
    setups: dict[str, ArmSetup],
    section: AblationsStage,
    same_as_baseline: set[str],
) -> list[ArmResult]:
    """Each arm's held-out mean reward, its paired comparison with the baseline (when both finished), the mechanisms
    it turns on and which of them never acted, or the error that ended it."""
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
        activity = activities.get(arm_name)
        mechanisms = [] if arm_name == section.baseline else arm_mechanisms(setups[arm_name], setups[section.baseline])
        idle = idle_mechanisms(mechanisms, activity) if result is not None else None
        arms.append(
            ArmResult(
                arm_name,
                finished=result is not None,
                comparison=comparison,
                mean=mean,
                se=se,
                activity=activity,
                mechanisms=tuple(m.name for m in mechanisms),
                idle=idle,
                error=errors.get(arm_name),
                same_as_baseline=arm_name in same_as_baseline,
            )
        )
    return arms


def _verdict(a: ArmResult) -> str:
    if a.inert:
        return "inert"
    return a.comparison.verdict.value if a.comparison else ("baseline" if a.finished else "failed")


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
            "verdict": _verdict(a),
            "landed": a.name == landed,
            "error": errors.get(a.name),
            "mechanisms": ", ".join(a.mechanisms) or None,
            **{name: getattr(a.activity, name) if a.activity else None for name in MechanismActivity.model_fields},
            "idle": a.idle.reason if a.idle else None,
        }
        for a in arms
    ]
