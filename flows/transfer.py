"""Stage 7 · transfer: did training break anything the policy could do before?

Base vs the hero's policy, each suite with the same seeds for both, compared per task (paired bootstrap CI):

1. same tasks, other harness — the held-out tasks through code-only tools (bash, glob, read, grep, write, edit,
   todowrite; no MCP apps);
2. other tasks, other harness — the bundled Terminal-Bench-style tasks in the terminal harness;
3. regression suite — the bundled GPQA/HLE-style multiple-choice set through the chat API.

Gate: no suite regresses beyond noise (each CI's high end ≥ −max_regression).

    recipe stage transfer --run RUN
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from evals.compare import paired_comparison
from evals.spec import HarnessKind
from evals.types import Comparison, Metric
from flows.config import Defect, StageName
from flows.stage import DEFAULT_RUNS_ROOT, open_stage
from flows.stage_gates import transfer_gate
from flows.stage_work import StageWork
from tasks.artifacts import log, publish_table
from tasks.evaluation import EvalJob, mcq
from tasks.plots import estimate_bars
from tasks.validation import Suite
from trainer.loops.policy import perturbed_policy

DAMAGE_NOISE = 0.3
"""Relative weight noise of ``Defect.DAMAGED_POLICY``: the systems defect's 0.2 moves the smoke trial's logprobs by
~0.23; 0.3 leaves a policy that has lost most of what it could do."""


@flow(name="transfer", log_prints=True)
def transfer(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 7 · transfer: base vs trained on code-only tools, terminal tasks and the MCQ suite; no regression."""
    with open_stage(run, StageName.TRANSFER, Path(runs_root)) as stage:
        config, section = stage.config, stage.section
        work = StageWork.of(stage)
        policies = {"base": Path(work.inputs.base_policy()), "trained": stage.upstream_path(StageName.HERO, "policy")}
        if Defect.DAMAGED_POLICY in config.defects:
            policies["trained"] = perturbed_policy(policies["trained"], stage.dir / "damaged-policy", DAMAGE_NOISE)
            log("defect %s: the hero's policy plus %g relative noise", Defect.DAMAGED_POLICY.value, DAMAGE_NOISE)
        settings = work.inputs.policy_settings()
        _, heldout = work.inputs.task_sets(settings)
        engine = work.tuned_engine(settings.harness.context_budget_tokens)
        harness_suites = {
            "code_only": (heldout, HarnessKind.CODE_ONLY, settings, section.passes, section.code_only),
            "terminal": (
                None,
                HarnessKind.TERMINAL,
                settings.for_terminal(),
                section.terminal_passes or section.passes,
                section.terminal,
            ),
        }
        trials = {}
        for suite, (tasks, harness, suite_settings, passes, enabled) in harness_suites.items():
            if not enabled:
                continue
            with stage.timed(suite):
                trials[suite] = {
                    label: work.evaluate(
                        EvalJob(suite, label, policy, tasks, harness, passes, suite_settings, engine)
                    ).trial_results()
                    for label, policy in policies.items()
                }
        if section.mcq:
            mcq_passes = section.mcq_passes or section.passes
            with stage.timed("mcq"):
                trials["mcq"] = {
                    label: mcq(work.scope, label, policy, engine, mcq_passes, config.seed + 1).trial_results()
                    for label, policy in policies.items()
                }
        stage.validate(Suite.EVAL_RESULTS)
        comparisons: dict[str, Comparison] = {
            suite: paired_comparison(by["base"], by["trained"], Metric.MEAN_REWARD, confidence=section.confidence)
            for suite, by in trials.items()
        }
        rows = [
            {"suite": s, "base": c.baseline_mean, "trained": c.candidate_mean, "delta": c.mean_diff}
            | {"ci_low": c.ci_low, "ci_high": c.ci_high, "verdict": c.verdict.value}
            for s, c in comparisons.items()
        ]
        publish_table(stage.stage.folder, "suites", rows, "base vs trained per transfer suite (mean reward)")
        stage.plot(
            "transfer deltas",
            estimate_bars(
                stage.dir / "transfer.png",
                {s: (c.mean_diff, (c.ci_high - c.ci_low) / 2) for s, c in comparisons.items()},
                "trained − base mean reward (95 % CI half-width)",
                "transfer: no regression beyond noise",
            ),
        )
        metrics = {"suites": rows}
        return stage.finish(transfer_gate(comparisons, section.thresholds, metrics))
