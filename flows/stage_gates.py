"""Each stage's gate as a pure function: what the stage measured + the profile's thresholds → ``GateReport``.

No Prefect, no I/O: the stage flows measure, these functions judge, and the tests feed them hand-made numbers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.diagnostics import ToolStats, ToolThresholds, tool_findings
from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName
from envs.judge_audit import JudgeAudit
from evals.types import Comparison, Verdict
from flows.config import (
    AblationsThresholds,
    DeriskThresholds,
    HeroThresholds,
    OverfitThresholds,
    StageName,
    SystemsThresholds,
    TitoThresholds,
    TransferThresholds,
)
from flows.gates import Finding, GateCriterion, GateReport, Op, check
from flows.mechanisms import Idle
from trainer.algorithms import MechanismActivity


def _worst(stats: Sequence[ToolStats], rate: str) -> tuple[float | None, str]:
    """The highest ``rate`` over tools that have it, and which tool (none named while every rate is 0)."""
    rated = [(getattr(s, rate), s.tool) for s in stats if getattr(s, rate) is not None]
    worst, tool = max(rated) if rated else (0.0, "")
    return worst, tool if worst > 0 else ""


# --- 1 · de-risk -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeriskMeasured:
    oracle_solved: int
    oracle_tasks: int
    rollouts: int
    infra_rate: float
    tool_stats: list[ToolStats]
    tasks_with_variance: int
    oracle_failures: list[tuple[str, str]] = field(default_factory=list)
    """(task id, error) of each oracle that did not solve its task."""
    dialect_mismatches: list[dict[str, Any]] = field(default_factory=list)
    """Base rollouts stopped on turns written in another tool-call dialect: ``{written, read, rollouts}`` each."""
    servers: list[dict[str, Any]] = field(default_factory=list)
    """A team's own MCP servers, each started alone on each world (``envs.byo.probes.ServerCheck`` as a dict)."""
    known_good_probes: int = 0
    judged_tasks: int = 0
    """Tasks with an ``llm_judge`` criterion (a team's held-out tasks may have them; evals grade them)."""
    judge_audit: JudgeAudit | None = None
    """The judge audited on graded samples of those tasks (``envs.judge_audit``); None: not run, ``judge_not_run``
    says why."""
    judge_not_run: str = "no graded samples were taken"
    metrics: dict[str, Any] = field(default_factory=dict)


ORACLE_ADVICE = "fix the task's oracle script or its expected answer (or drop the task) before training on it"
MAX_ORACLE_FINDINGS = 10


SERVER_ADVICE = (
    "fix the server's entry in the environment file (command, secrets, tools) or install it (make install-mcp-servers)"
    " and check it alone: recipe envs check --environment FILE"
)
NO_ORACLE = (
    "not run: no task has an oracle (the servers' start, the known-good probes and the base's reward variance stand in)"
)


def _validity_criteria(m: DeriskMeasured, t: DeriskThresholds, oracle_rate: float | None) -> list[GateCriterion]:
    """Are the tasks valid: the oracles' pass rate; for a team's own environment without oracles, its servers start
    on every world and known-good probes ran in the oracles' stead (listed in the report's ``not_checked``)."""
    criteria = []
    if m.oracle_tasks or not m.servers:
        criteria.append(
            check("oracle pass rate", oracle_rate, Op.GE, t.min_oracle_pass_rate, f"{m.oracle_solved}/{m.oracle_tasks}")
        )
    if m.servers:
        started = sum(row["error"] is None for row in m.servers)
        detail = f"{started}/{len(m.servers)} (server × world)"
        criteria.append(
            check("MCP servers that start and list their tools", started / len(m.servers), Op.GE, 1.0, detail)
        )
        criteria.append(
            check("known-good probe calls", m.known_good_probes, Op.GE, 1, "user probes + complete schema probes")
        )
    return criteria


JUDGE_ADVICE = (
    "run the judge at temperature 0 on a stronger model, or rewrite the criteria so that an answer can be checked "
    "against them (a number, a named fact); then re-run de-risk"
)


def _judge_criteria(m: DeriskMeasured, t: DeriskThresholds) -> tuple[list[GateCriterion], list[Finding]]:
    """Judge sanity on its audited samples: it agrees with itself and fails empty answers (none when not audited)."""
    audit = m.judge_audit
    if audit is None:
        return [], []
    if not audit.samples:  # nothing reached a verdict: a judge that never answers fails; one never asked is not run
        if not audit.failures:
            return [], []
        failure = audit.failures[0]
        criterion = check("graded samples the judge answered", 0, Op.GE, 1, failure)
        advice = "check judge.url, judge.model and the keys in judge.api_key_env: the judge must answer a completion"
        return [criterion], [Finding(subject=f"judge {audit.model}", problem=failure, advice=advice)]
    failed = f", {audit.failed_calls} calls failed" if audit.failed_calls else ""
    criteria = [
        check(
            "judge agrees with itself on re-judged samples",
            audit.agreement,
            Op.GE,
            t.min_judge_agreement,
            f"{audit.agreements}/{audit.rejudgements} re-judgements over {len(audit.samples)} graded samples{failed}",
        ),
        check(
            "empty answers the judge passes",
            audit.empty_passes,
            Op.LE,
            t.max_judge_empty_passes,
            f"of {len(audit.samples)} criteria",
        ),
    ]
    findings = []
    if not criteria[0].passed:
        flips = audit.rejudgements - audit.agreements
        findings.append(
            Finding(
                subject=f"judge {audit.model}",
                problem=f"{flips} of {audit.rejudgements} re-judgements of the same answer and evidence differ from "
                f"the first verdict{failed}",
                advice=JUDGE_ADVICE,
                rate=audit.agreement,
            )
        )
    passed_empty = [sample.criterion for sample in audit.samples if sample.empty_passed]
    if passed_empty and not criteria[1].passed:
        findings.append(
            Finding(
                subject=f"judge {audit.model}",
                problem=f"passes an empty answer over an unchanged world on {len(passed_empty)} criteria, e.g. "
                f"{passed_empty[0]!r}",
                advice=JUDGE_ADVICE,
            )
        )
    return criteria, findings


def checks_not_run(m: DeriskMeasured) -> list[str]:
    """What de-risk could not check, and why: a pass means only what ran."""
    not_run = [f"oracle pass rate: {NO_ORACLE}"] if m.servers and not m.oracle_tasks else []
    if m.judged_tasks and m.judge_audit is None:
        not_run.append(f"judge sanity: not run ({m.judged_tasks} tasks have llm_judge criteria; {m.judge_not_run})")
    elif m.judge_audit is not None and not m.judge_audit.samples and not m.judge_audit.failures:
        not_run.append(
            f"judge sanity: no graded sample ({m.judged_tasks} tasks have llm_judge criteria, but none of the base's "
            "answers reached the judge: a task's required output file was not written, or its rollout failed)"
        )
    return not_run


def derisk_gate(m: DeriskMeasured, t: DeriskThresholds, subset_size: int) -> GateReport:
    """Oracle ≥ threshold, infra ≤ threshold, no tool past its failure / empty / timeout threshold, and enough tasks
    with reward variance for the overfit subset; when the judge was audited, it agrees with itself and fails empty
    answers. Every tool past a threshold, each oracle that failed its task (the first ``MAX_ORACLE_FINDINGS``) and an
    unsound judge becomes a finding with its advice."""
    failure, failing_tool = _worst(m.tool_stats, "failure_rate")
    empty, empty_tool = _worst(m.tool_stats, "empty_rate")
    timeout, slow_tool = _worst(m.tool_stats, "timeout_rate")
    oracle_rate = m.oracle_solved / m.oracle_tasks if m.oracle_tasks else None
    criteria = [
        *_validity_criteria(m, t, oracle_rate),
        check("infra error rate (base rollouts)", m.infra_rate if m.rollouts else None, Op.LE, t.max_infra_error_rate),
        check("worst tool failure rate, known-good calls", failure, Op.LE, t.max_tool_failure_rate, failing_tool),
        check("worst tool empty-on-success rate", empty, Op.LE, t.max_tool_empty_rate, empty_tool),
        check("worst tool timeout rate", timeout, Op.LE, t.max_tool_timeout_rate, slow_tool),
        check("train tasks with reward variance", m.tasks_with_variance, Op.GE, subset_size, "the overfit subset size"),
        check(
            "base rollouts in another tool-call dialect",
            sum(row["rollouts"] for row in m.dialect_mismatches),
            Op.LE,
            0,
            "; ".join(f"{row['written']} read as {row['read']}" for row in m.dialect_mismatches),
        ),
    ]
    thresholds = ToolThresholds(
        max_failure_rate=t.max_tool_failure_rate,
        max_empty_rate=t.max_tool_empty_rate,
        max_timeout_rate=t.max_tool_timeout_rate,
        min_oracle_pass_rate=t.min_oracle_pass_rate,
    )
    findings = [
        Finding(subject=task_id, problem=f"the oracle does not solve its task: {error}", advice=ORACLE_ADVICE)
        for task_id, error in m.oracle_failures[:MAX_ORACLE_FINDINGS]
    ]
    findings += [
        Finding(
            subject=f"server {row['server']}",
            problem=f"on world {row['world_id']}: {row['error']}",
            advice=SERVER_ADVICE,
        )
        for row in m.servers
        if row["error"]
    ]
    findings += [
        Finding(subject=f.tool, problem=f.problem, advice=f.advice, rate=f.rate)
        for f in tool_findings(m.tool_stats, thresholds)
    ]
    findings += [
        Finding(
            subject="harness.tool_format",
            problem=f"the base writes its tool calls in {row['written']}, but the harness reads {row['read']}: "
            f"{row['rollouts']} of {m.rollouts} base rollouts stopped on calls it could not parse",
            advice=f"set harness.tool_format to {row['written']} (the dialect the model family speaks; vLLM "
            f"--tool-call-parser {TOOL_FORMATS[ToolFormatName(row['written'])].vllm_parser}), or use a base taught "
            f"{row['read']}",
            rate=row["rollouts"] / m.rollouts if m.rollouts else None,
        )
        for row in m.dialect_mismatches
    ]
    judge_criteria, judge_findings = _judge_criteria(m, t)
    return GateReport.build(
        StageName.DERISK, criteria + judge_criteria, findings + judge_findings, m.metrics, checks_not_run(m)
    )


# --- 2 · TITO --------------------------------------------------------------------------------------------------------


def tito_gate(
    misalignments: int,
    multi_call_rollouts: int,
    drift_rate: float,
    t: TitoThresholds,
    examples: Sequence[str] = (),
    rerender_changed: Sequence[int] = (),
) -> GateReport:
    """Zero misalignments over enough multi-call rollouts; what a chat-completions harness would have trained on
    instead (re-tokenised turns, ``rerender_changed``: per rollout, the tokens a template re-render drops or changes)
    is reported beside them as findings."""
    criteria = [
        check("TITO misalignments", misalignments, Op.LE, t.max_misalignments, "; ".join(examples[:3])),
        check("rollouts with ≥ 2 tool calls checked", multi_call_rollouts, Op.GE, t.min_multi_call_rollouts),
    ]
    findings = []
    if misalignments > 0:
        first = f"; first: {examples[0]}" if examples else ""
        findings.append(
            Finding(
                subject="harness",
                problem=f"{misalignments} turns hold other tokens than crossed the wire{first}",
                advice="build every prompt from the token ids so far and keep the sampled ids as returned; "
                "never rebuild the history from rendered text",
            )
        )
    if drift_rate > 0:
        findings.append(
            Finding(
                subject="chat-completions harness",
                problem=f"{drift_rate:.1%} of sampled turns would re-tokenise to other ids",
                advice="keep token-in/token-out rollouts (this harness); never train on re-rendered chat text",
                rate=drift_rate,
            )
        )
    changed = [n for n in rerender_changed if n]
    if changed:
        findings.append(
            Finding(
                subject="chat-template re-render",
                problem=f"{len(changed)} of {len(rerender_changed)} rollouts would lose or change sampled tokens if "
                f"their conversation were re-rendered from chat messages ({sum(changed)} tokens, up to "
                f"{max(changed)} in one: reasoning the template strips, calls it re-formats, separators)",
                advice="train on the token ids the engine returned (this harness); a chat-completions history is "
                "not what the policy sampled",
                rate=len(changed) / len(rerender_changed),
            )
        )
    metrics = {
        "misalignments": misalignments,
        "multi_call_rollouts": multi_call_rollouts,
        "drift_rate": drift_rate,
        "rerender_changed_tokens": sum(rerender_changed),
        "rerender_changed_rollouts": len(changed),
        "rerender_changed_max": max(rerender_changed, default=0),
    }
    return GateReport.build(StageName.TITO, criteria, findings, metrics)


# --- 3 · systems -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemsMeasured:
    logprob_mismatch: float | None
    idle_share: float | None
    """The chosen knobs' trainer idle share."""
    plan_bytes: int
    chosen: str
    """The chosen knobs' label."""
    metrics: dict[str, Any] = field(default_factory=dict)


def systems_gate(m: SystemsMeasured, t: SystemsThresholds) -> GateReport:
    criteria = [
        check("train-inference mean |Δ logprob|", m.logprob_mismatch, Op.LT, t.max_logprob_mismatch),
        check("trainer idle share (chosen knobs)", m.idle_share, Op.LE, t.max_trainer_idle_share, m.chosen),
        check("plan memory (GiB)", m.plan_bytes / 2**30, Op.LE, t.memory_budget_gib, "weights + optimizer + KV cache"),
    ]
    findings = []
    if m.logprob_mismatch is not None and m.logprob_mismatch >= t.max_logprob_mismatch:
        findings.append(
            Finding(
                subject="engine weights",
                problem=f"the engine's logprobs differ from the trainer's by {m.logprob_mismatch:.3f} on average at "
                "step 1, when both should hold the same weights",
                advice="check what the engine loaded: the same checkpoint, dtype and tied embeddings as the trainer, "
                "and a fresh folder per weight version",
                rate=m.logprob_mismatch,
            )
        )
    return GateReport.build(StageName.SYSTEMS, criteria, findings, m.metrics)


# --- 4 · overfit -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainTrend:
    """The train reward early and late in a run: the means of its first and last quarter of steps (at least one
    step each), and the standard error of their difference, √(s²_first/n_first + s²_last/n_last) (0 for one step)."""

    first: float
    last: float
    se: float

    @classmethod
    def of(cls, rewards: Sequence[float]) -> TrainTrend | None:
        """None for a run of under two steps (nothing to compare)."""
        if len(rewards) < 2:
            return None
        quarter = max(1, len(rewards) // 4)
        early, late = rewards[:quarter], rewards[-quarter:]
        return cls(statistics.fmean(early), statistics.fmean(late), math.sqrt(_var_of_mean(early) + _var_of_mean(late)))

    @property
    def rose(self) -> bool:
        """Rose beyond noise: last − first > 2 SE."""
        return self.last - self.first > 2 * self.se

    @property
    def fell(self) -> bool:
        """Fell beyond noise: first − last > 2 SE."""
        return self.first - self.last > 2 * self.se

    def __str__(self) -> str:
        return f"train reward {self.first:.3f} → {self.last:.3f} (first vs last quarter of steps, SE {self.se:.3f})"


def _var_of_mean(values: Sequence[float]) -> float:
    return statistics.variance(values) / len(values) if len(values) > 1 else 0.0


@dataclass(frozen=True)
class OverfitMeasured:
    before: float
    """The subset's mean reward before training."""
    after: float
    gain: float
    p_value: float
    steps: int
    metrics: dict[str, Any] = field(default_factory=dict)
    trend: TrainTrend | None = None


def overfit_gate(m: OverfitMeasured, t: OverfitThresholds) -> GateReport:
    detail = f"{m.before:.3f} → {m.after:.3f} in {m.steps} steps"
    criteria = [
        check("subset reward gain", m.gain, Op.GE, t.min_reward_gain, detail),
        check("one-sided p (paired over tasks)", m.p_value, Op.LE, t.max_p_value),
    ]
    findings = []
    if m.gain < t.min_reward_gain:
        trend = f"; {m.trend}" if m.trend else ""
        if m.after < m.before:
            problem = f"the subset reward fell, {m.before:.3f} → {m.after:.3f}{trend}: the updates descend the reward"
            advice = "check the sign of the advantages and of the policy loss (a flipped convention descends)"
        else:
            problem = f"the subset reward did not rise enough, {m.before:.3f} → {m.after:.3f}{trend}"
            advice = "check the learning rate and that the steps change the weights; or give more steps"
        findings.append(Finding(subject="training", problem=problem, advice=advice))
    return GateReport.build(StageName.OVERFIT, criteria, findings, m.metrics)


# --- 5 · ablations ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmResult:
    name: str
    finished: bool
    comparison: Comparison | None
    """Against the baseline arm (None for the baseline itself, or for an arm that did not finish)."""
    mean: float | None = None
    se: float | None = None
    activity: MechanismActivity | None = None
    """Its mechanisms' activity over its training steps (None: not measured, e.g. a SkyRL job)."""
    mechanisms: tuple[str, ...] = ()
    """The mechanisms it turns on relative to the baseline (``flows.mechanisms``)."""
    idle: Idle | None = None
    """Those of them that never acted; ``idle.inert`` when none acted."""
    error: str | None = None
    """What ended an arm that did not finish."""
    same_as_baseline: bool = False
    """Every training step's loss equalled the baseline arm's: it trained exactly as the baseline did."""

    @property
    def inert(self) -> bool:
        """None of its mechanisms acted: its score measures nothing, whatever its CI says."""
        return self.idle is not None and self.idle.inert


def landed_arm(arms: Sequence[ArmResult], baseline: str, prior: str) -> tuple[str, str]:
    """(landed arm, the rule's reason). Rule: an inert arm (none of its mechanisms acted in training) is never landed,
    whatever its CI. Among the other arms whose paired CI vs the baseline lies above 0 (gain), the largest mean gain;
    with no gain beyond noise, the recipe's landed arm (``prior``) unless it is a loss or inert; failing that, the
    baseline. Noise alone never moves the landed config away from the published evidence, and a comparison of arms
    that did not act never moves it at all."""
    inert = [a.name for a in arms if a.inert]
    skipped = f" (inert, not considered: {', '.join(inert)})" if inert else ""
    gains = [a for a in arms if not a.inert and a.comparison is not None and a.comparison.verdict is Verdict.GAIN]
    if gains:
        best = max(gains, key=lambda a: a.comparison.mean_diff)  # type: ignore[union-attr]
        return best.name, f"{best.name} is the largest gain beyond noise over {baseline}{skipped}"
    prior_arm = {a.name: a for a in arms}.get(prior)
    if prior_arm is not None and prior_arm.inert:
        reason = prior_arm.idle.reason  # type: ignore[union-attr]
        return baseline, f"no active arm beats {baseline} beyond noise and {prior} is inert ({reason}): keep {baseline}"
    if prior_arm is not None and prior_arm.comparison is not None and prior_arm.comparison.verdict is not Verdict.LOSS:
        return prior, f"no arm beats {baseline} beyond noise; the recipe's landed arm {prior} is not a loss{skipped}"
    return (
        baseline,
        f"no arm beats {baseline} beyond noise and {prior} is a loss (or did not finish): keep {baseline}{skipped}",
    )


def _arm_findings(a: ArmResult, landed: str) -> list[Finding]:
    """Its verdict vs the baseline ("inert: …" for an inert arm), its idle mechanisms when only some acted, or the
    error that ended it."""
    findings = []
    if not a.finished:
        advice = "fix the cause (the stage log has the traceback), then retry: recipe stage ablations --run RUN"
        findings.append(Finding(subject=a.name, problem=f"failed: {a.error or 'did not finish'}", advice=advice))
    if a.idle is not None:
        problem = f"{'inert' if a.idle.inert else 'idle'}: {a.idle.reason}"
        findings.append(Finding(subject=a.name, problem=problem, advice=a.idle.advice))
    if a.same_as_baseline:
        problem = "trained exactly as the baseline did (every step's loss equal to the baseline's)"
        advice = "check that the arm's settings reach the trainer; if they do, they changed nothing here"
        findings.append(Finding(subject=a.name, problem=problem, advice=advice))
    if a.comparison is not None and not a.inert:
        c = a.comparison
        problem = f"{c.verdict.value}: Δ {c.mean_diff:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
        findings.append(Finding(subject=a.name, problem=problem, advice="keep" if a.name == landed else "not landed"))
    return findings


def ablations_gate(
    arms: Sequence[ArmResult],
    landed: str,
    reason: str,
    metrics: dict[str, Any],
    t: AblationsThresholds = AblationsThresholds(),  # noqa: B008 (frozen)
) -> GateReport:
    finished = sum(a.finished for a in arms)
    criteria: list[GateCriterion] = [
        check("arms finished", finished, Op.EQ, len(arms), ", ".join(a.name for a in arms if not a.finished)),
        check("landed config chosen by the rule", 1.0, Op.EQ, 1.0, f"{landed}: {reason}"),
    ]
    if t.max_inert_arms is not None:
        inert = [a.name for a in arms if a.inert]
        criteria.append(check("inert arms", len(inert), Op.LE, t.max_inert_arms, ", ".join(inert)))
    findings = [finding for a in arms for finding in _arm_findings(a, landed)]
    return GateReport.build(StageName.ABLATIONS, criteria, findings, metrics)


# --- 6 · hero --------------------------------------------------------------------------------------------------------


def hero_gate(
    comparison: Comparison, steps: int, t: HeroThresholds, metrics: dict[str, Any], trend: TrainTrend | None = None
) -> GateReport:
    c = comparison
    detail = (
        f"base {c.baseline_mean:.3f} → trained {c.candidate_mean:.3f}, Δ {c.mean_diff:+.3f} "
        f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}] ({c.confidence:.0%} paired bootstrap over {c.n_tasks} tasks)"
    )
    criteria = [
        check("held-out Pass@1 gain, CI low end", c.ci_low, Op.GT, t.min_ci_low, detail),
        check("optimizer steps run", steps, Op.GE, 1),
    ]
    findings = []
    if c.ci_low <= t.min_ci_low and trend is not None:
        if trend.rose:
            problem = f"the {trend} rose, but the held-out Pass@1 did not follow beyond noise"
            advice = "more steps or held-out passes; check that the train tasks teach what the held-out ones test"
        else:
            verdict = (
                "fell: training on its rewards made the policy worse"
                if trend.fell
                else "did not rise beyond noise: the policy learned nothing from its rewards"
            )
            problem = f"the {trend} {verdict}"
            advice = "check that each trajectory is graded with its own reward (grading, group pairing) and the "
            advice += "advantages reach the loss; the overfit gate passed on the same trainer"
        findings.append(Finding(subject="training", problem=problem, advice=advice))
    return GateReport.build(StageName.HERO, criteria, findings, metrics)


# --- 7 · transfer ----------------------------------------------------------------------------------------------------


def transfer_gate(suites: dict[str, Comparison], t: TransferThresholds, metrics: dict[str, Any]) -> GateReport:
    """No suite regresses beyond noise: each paired CI's high end stays at or above −max_regression."""
    criteria = [
        check(
            f"{name}: trained − base, CI high end",
            c.ci_high,
            Op.GE,
            -t.max_regression,
            f"{c.baseline_mean:.3f} → {c.candidate_mean:.3f} ({c.verdict.value})",
        )
        for name, c in suites.items()
    ]
    findings = [
        Finding(
            subject=name,
            problem=f"the trained policy lost what the base could do here: {c.baseline_mean:.3f} → "
            f"{c.candidate_mean:.3f} (Δ {c.mean_diff:+.3f}, CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}])",
            advice="compare the two policies' replies on this suite (recipe explore); if the hero's checkpoint loads "
            "intact, train with a lower learning rate or fewer steps, or mix this format into the training tasks",
            rate=c.mean_diff,
        )
        for name, c in suites.items()
        if c.ci_high < -t.max_regression
    ]
    return GateReport.build(StageName.TRANSFER, criteria, findings, metrics)
