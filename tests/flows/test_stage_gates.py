"""Each stage's gate from hand-made measurements: the verdict, the failed criteria, the findings."""

import pickle

import pytest

from envs.diagnostics import ToolStats
from evals.types import Comparison, ComparisonMethod, Metric, Verdict
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
from flows.gates import GateFailed, GateReport, Op, check, fmt
from flows.mechanisms import Idle
from flows.stage_gates import (
    ArmResult,
    DeriskMeasured,
    OverfitMeasured,
    SystemsMeasured,
    TrainTrend,
    ablations_gate,
    derisk_gate,
    hero_gate,
    landed_arm,
    overfit_gate,
    systems_gate,
    tito_gate,
    transfer_gate,
)


def stats(tool: str, **rates) -> ToolStats:
    fields = {
        "failure_rate": 0.0,
        "top_signature": None,
        "empty_rate": 0.0,
        "timeout_rate": 0.0,
        "oracle_pass_rate": 1.0,
    }
    return ToolStats(tool=tool, calls=10, **fields | rates)


def comparison(diff: float, low: float, high: float, verdict: Verdict, base: float = 0.4) -> Comparison:
    return Comparison(
        metric=Metric.PASS_AT_1, method=ComparisonMethod.PAIRED_BOOTSTRAP, baseline_mean=base,
        candidate_mean=base + diff, mean_diff=diff, ci_low=low, ci_high=high, confidence=0.95, verdict=verdict,
        n_tasks=75,
    )  # fmt: skip


def test_check_compares_and_fails_missing_measurements() -> None:
    assert check("a", 0.5, Op.GE, 0.5).passed and not check("a", 0.49, Op.GE, 0.5).passed
    assert check("b", 0.02, Op.LT, 0.03).passed and not check("b", 0.03, Op.LT, 0.03).passed
    assert not check("c", None, Op.LE, 1.0).passed and not check("d", float("nan"), Op.LE, 1.0).passed


def test_derisk_passes_a_sound_environment() -> None:
    measured = DeriskMeasured(300, 300, 400, 0.0, [stats("sheets_read_cell")], tasks_with_variance=40)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=16)
    assert report.passed and not report.findings and len(report.criteria) == 7


def test_derisk_names_the_broken_tools_rates_and_fixes() -> None:
    broken = [
        stats("sheets_read_cell"),
        stats("slides_add_slide", empty_rate=1.0),
        stats("code_exec_run_python", failure_rate=0.25, top_signature="ModuleNotFoundError"),
        stats("pdf_read_pdf", oracle_pass_rate=1 / 9),
    ]
    measured = DeriskMeasured(298, 306, 400, 0.0, broken, tasks_with_variance=10)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=16)
    failed = {c.name: c for c in report.failed_criteria()}
    assert failed["oracle pass rate"].measured == 298 / 306
    assert failed["worst tool empty-on-success rate"].detail == "slides_add_slide"
    assert failed["worst tool failure rate, known-good calls"].measured == 0.25
    assert failed["train tasks with reward variance"].measured == 10
    by_tool = {f.subject: f for f in report.findings}
    assert "preinstall" in by_tool["code_exec_run_python"].advice and by_tool["code_exec_run_python"].rate == 0.25
    assert "confirmation" in by_tool["slides_add_slide"].advice
    assert "column" in by_tool["pdf_read_pdf"].advice and "11%" in by_tool["pdf_read_pdf"].problem
    assert "sheets_read_cell" not in by_tool


def test_tito_gate_wants_zero_misalignments_over_multi_call_rollouts() -> None:
    assert tito_gate(0, 5, 0.1, TitoThresholds(min_multi_call_rollouts=4)).passed
    assert not tito_gate(1, 5, 0.0, TitoThresholds(min_multi_call_rollouts=4), ["sampled: g#0"]).passed
    assert not tito_gate(0, 3, 0.0, TitoThresholds(min_multi_call_rollouts=4)).passed
    assert tito_gate(0, 5, 0.25, TitoThresholds()).findings[0].rate == 0.25  # drift is reported, not gated


def test_systems_gate() -> None:
    thresholds = SystemsThresholds(max_logprob_mismatch=0.03, max_trainer_idle_share=0.5, memory_budget_gib=1.0)
    assert systems_gate(SystemsMeasured(3e-6, 0.2, 2**29, "x"), thresholds).passed
    assert not systems_gate(SystemsMeasured(0.05, 0.2, 2**29, "x"), thresholds).passed
    assert not systems_gate(SystemsMeasured(3e-6, 0.2, 2**31, "x"), thresholds).passed  # 2 GiB plan, 1 GiB budget


def test_overfit_gate_needs_the_gain_and_the_test() -> None:
    t = OverfitThresholds(min_reward_gain=0.1, max_p_value=0.01)
    assert overfit_gate(OverfitMeasured(0.5, 0.65, 0.15, 0.001, 16), t).passed
    assert not overfit_gate(OverfitMeasured(0.5, 0.55, 0.05, 0.001, 16), t).passed
    assert not overfit_gate(OverfitMeasured(0.5, 0.65, 0.15, 0.02, 16), t).passed
    assert overfit_gate(OverfitMeasured(0.5, 0.65, 0.15, 0.01, 16), t).passed  # p ≤ max_p_value


def test_train_trend_by_hand() -> None:
    # 8 steps → quarters of 2: first [0.2, 0.4] mean 0.3, last [0.6, 0.8] mean 0.7;
    # SE = √(var/n + var/n) with var = 0.02 (sample variance of two values 0.2 apart), n = 2 → √0.02 ≈ 0.1414
    trend = TrainTrend.of([0.2, 0.4, 0.5, 0.5, 0.5, 0.5, 0.6, 0.8])
    assert (trend.first, trend.last) == pytest.approx((0.3, 0.7)) and trend.se == pytest.approx(0.02**0.5)
    assert trend.rose  # 0.4 > 2 · 0.1414
    flat = TrainTrend.of([0.3, 0.1, 0.5, 0.3])  # first 0.3, last 0.3 (quarters of one step, SE 0)
    assert not flat.rose and not flat.fell
    assert TrainTrend.of([0.5]) is None


def test_a_failed_overfit_gate_says_whether_the_reward_fell_or_stood() -> None:
    t = OverfitThresholds(min_reward_gain=0.1, max_p_value=0.01)
    fell = overfit_gate(OverfitMeasured(0.5, 0.3, -0.2, 0.99, 16, trend=TrainTrend(0.5, 0.2, 0.02)), t)
    [finding] = fell.findings
    assert "the subset reward fell, 0.500 → 0.300; train reward 0.500 → 0.200" in finding.problem
    assert "sign of the advantages" in finding.advice
    [stood] = overfit_gate(OverfitMeasured(0.5, 0.52, 0.02, 0.3, 16), t).findings
    assert "did not rise enough" in stood.problem and "learning rate" in stood.advice
    assert not overfit_gate(OverfitMeasured(0.5, 0.65, 0.15, 0.001, 16), t).findings


def test_landed_arm_rule() -> None:
    def arm(name, verdict, diff):
        return ArmResult(name, True, comparison(diff, diff - 0.05, diff + 0.05, verdict))

    base = ArmResult("baseline", True, None)
    gains = [
        base,
        arm("prompt_mean", Verdict.GAIN, 0.08),
        arm("nudge", Verdict.GAIN, 0.06),
        arm("prior", Verdict.LOSS, -0.1),
    ]
    assert landed_arm(gains, "baseline", "prior")[0] == "prompt_mean"
    noise = [base, arm("prompt_mean", Verdict.WITHIN_NOISE, 0.03), arm("prior", Verdict.WITHIN_NOISE, -0.01)]
    assert landed_arm(noise, "baseline", "prior")[0] == "prior"
    lost = [base, arm("prompt_mean", Verdict.WITHIN_NOISE, 0.03), arm("prior", Verdict.LOSS, -0.1)]
    assert landed_arm(lost, "baseline", "prior")[0] == "baseline"


def test_ablations_gate_fails_when_an_arm_did_not_finish() -> None:
    arms = [ArmResult("baseline", True, None), ArmResult("dppo", False, None)]
    report = ablations_gate(arms, "baseline", "reason", {})
    assert not report.passed and report.failed_criteria()[0].detail == "dppo"


INERT_DPPO = Idle("DPPO never acted (dppo_masked_share = 0)", "train off-policy", inert=True)


def test_landed_arm_never_lands_an_inert_arm() -> None:
    def arm(name, verdict, diff, idle=None):
        return ArmResult(name, True, comparison(diff, diff - 0.05, diff + 0.05, verdict), idle=idle)

    base = ArmResult("baseline", True, None)
    # the largest gain is inert: the next active gain lands, and the reason says which arm was passed over
    gains = [base, arm("dppo", Verdict.GAIN, 0.2, INERT_DPPO), arm("prompt_mean", Verdict.GAIN, 0.08)]
    landed, reason = landed_arm(gains, "baseline", "prior")
    assert landed == "prompt_mean" and "inert, not considered: dppo" in reason
    # the only gain is inert, and so is the prior (not a loss, but it measured nothing): keep the baseline
    only_inert = [base, arm("dppo", Verdict.GAIN, 0.2, INERT_DPPO), arm("prior", Verdict.WITHIN_NOISE, 0.0, INERT_DPPO)]
    landed, reason = landed_arm(only_inert, "baseline", "prior")
    assert landed == "baseline"
    assert reason == (
        "no active arm beats baseline beyond noise and prior is inert (DPPO never acted (dppo_masked_share = 0)): "
        "keep baseline"
    )
    # an arm with only some mechanisms idle is not inert: its gain still lands
    partly = Idle("context nudge never acted (nudges_inserted = 0)", "longer tasks", inert=False)
    assert landed_arm([base, arm("prior", Verdict.GAIN, 0.1, partly)], "baseline", "prior")[0] == "prior"


def test_ablations_gate_reports_inert_and_idle_mechanisms() -> None:
    partly = Idle("context nudge never acted (nudges_inserted = 0)", "longer tasks", inert=False)
    arms = [
        ArmResult("baseline", True, None),
        ArmResult("dppo", True, comparison(0.0, 0.0, 0.0, Verdict.WITHIN_NOISE), idle=INERT_DPPO),
        ArmResult("prior", True, comparison(0.02, -0.01, 0.05, Verdict.WITHIN_NOISE), idle=partly),
    ]
    report = ablations_gate(arms, "prior", "reason", {})
    assert report.passed  # inert arms are reported, not failed, here
    problems = {(f.subject, f.problem) for f in report.findings}
    assert problems == {
        ("dppo", "inert: DPPO never acted (dppo_masked_share = 0)"),  # no "within noise" for an inert arm
        ("prior", "idle: context nudge never acted (nudges_inserted = 0)"),
        ("prior", "within_noise: Δ +0.020 [-0.010, +0.050]"),
    }


def test_hero_gate_wants_the_ci_above_zero() -> None:
    assert hero_gate(comparison(0.07, 0.01, 0.13, Verdict.GAIN), 30, HeroThresholds(), {}).passed
    assert not hero_gate(comparison(0.05, -0.01, 0.11, Verdict.WITHIN_NOISE), 30, HeroThresholds(), {}).passed


def test_a_failed_hero_gate_says_whether_the_train_reward_rose() -> None:
    noise = comparison(0.0, -0.05, 0.05, Verdict.WITHIN_NOISE)
    [flat] = hero_gate(noise, 30, HeroThresholds(), {}, TrainTrend(0.40, 0.41, 0.02)).findings
    assert "did not rise beyond noise: the policy learned nothing from its rewards" in flat.problem
    assert "its own reward" in flat.advice
    [fell] = hero_gate(noise, 30, HeroThresholds(), {}, TrainTrend(0.504, 0.088, 0.044)).findings  # shuffled rewards
    assert "0.504 → 0.088" in fell.problem and "fell: training on its rewards made the policy worse" in fell.problem
    [rose] = hero_gate(noise, 30, HeroThresholds(), {}, TrainTrend(0.40, 0.60, 0.02)).findings
    assert "rose, but the held-out Pass@1 did not follow" in rose.problem
    passed = hero_gate(comparison(0.07, 0.01, 0.13, Verdict.GAIN), 30, HeroThresholds(), {}, TrainTrend(0.4, 0.4, 0))
    assert not passed.findings


def test_transfer_gate_fails_only_on_a_regression_beyond_noise() -> None:
    suites = {
        "code_only": comparison(-0.02, -0.06, 0.02, Verdict.WITHIN_NOISE),
        "mcq": comparison(0.0, -0.1, 0.1, Verdict.WITHIN_NOISE),
    }
    assert transfer_gate(suites, TransferThresholds(), {}).passed
    suites["terminal"] = comparison(-0.2, -0.3, -0.1, Verdict.LOSS)
    report = transfer_gate(suites, TransferThresholds(), {})
    assert [c.name for c in report.failed_criteria()] == ["terminal: trained − base, CI high end"]


def test_gate_failed_pickles_with_its_report() -> None:
    report = GateReport.build(StageName.OVERFIT, [check("gain", 0.05, Op.GE, 0.1)])
    error = pickle.loads(pickle.dumps(GateFailed(report.model_dump_json())))
    assert error.report == report and "gain 0.05 (needs >= 0.1)" in str(error)
    assert "| gain | 0.05 | >= 0.1 | **FAIL** |" in report.markdown()


def test_derisk_names_a_harness_reading_another_dialect_than_the_base_writes() -> None:
    """``wrong_tool_format``: not "the model cannot call tools" but which dialect each side speaks, and the fix."""
    mismatch = [{"written": "qwen3_xml", "read": "hermes_json", "rollouts": 380}]
    measured = DeriskMeasured(300, 300, 400, 0.0, [stats("sheets_read_cell")], 0, dialect_mismatches=mismatch)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=16)
    failed = {c.name for c in report.criteria if not c.passed}
    assert failed == {"base rollouts in another tool-call dialect", "train tasks with reward variance"}
    [finding] = report.findings
    assert finding.subject == "harness.tool_format" and finding.rate == 0.95
    assert "writes its tool calls in qwen3_xml, but the harness reads hermes_json: 380 of 400" in finding.problem
    assert "set harness.tool_format to qwen3_xml" in finding.advice and "qwen3_coder" in finding.advice


def test_derisk_names_each_task_whose_oracle_fails() -> None:
    failures = [("ib-1-toy-0003", "graded 0")]
    measured = DeriskMeasured(35, 36, 40, 0.0, [stats("sheets_read_cell")], 16, oracle_failures=failures)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=2)
    assert [c.name for c in report.failed_criteria()] == ["oracle pass rate"]
    [finding] = report.findings
    assert finding.subject == "ib-1-toy-0003" and "graded 0" in finding.problem and "oracle" in finding.advice


def test_tito_misalignments_are_a_harness_finding() -> None:
    examples = ["sampled: g#0 turn 2: the span is not what the engine returned"]
    report = tito_gate(3, 4, 0.1, TitoThresholds(), examples)
    assert not report.passed
    harness = next(f for f in report.findings if f.subject == "harness")
    assert harness.problem.startswith("3 turns hold other tokens") and examples[0] in harness.problem
    assert "rendered text" in harness.advice


def test_systems_names_the_engine_weights_when_logprobs_disagree() -> None:
    report = systems_gate(SystemsMeasured(0.41, 0.2, 2**20, "budget=2048"), SystemsThresholds())
    assert [c.name for c in report.failed_criteria()] == ["train-inference mean |Δ logprob|"]
    [finding] = report.findings
    assert finding.subject == "engine weights" and "0.410" in finding.problem and finding.rate == 0.41


def test_a_zero_regression_bar_prints_as_zero_not_minus_zero() -> None:
    suites = {"mcq": comparison(0.0, -0.05, 0.05, Verdict.WITHIN_NOISE)}
    report = transfer_gate(suites, TransferThresholds(max_regression=0.0), {})
    assert fmt(-0.0) == "0" and ">= 0 |" in report.markdown() and "-0 " not in report.markdown()
    from tasks.report import fmt as cell

    assert cell(-0.0) == "0" and cell(-0.025) == "-0.025"  # recipe audit / report print the bar through this one


def test_an_arm_that_crashed_is_a_finding_with_its_error() -> None:
    arms = [ArmResult("baseline", True, None), ArmResult("dppo", False, None, error="DeliberateCrash: at step 1")]
    report = ablations_gate(arms, "baseline", "reason", {})
    [finding] = [f for f in report.findings if f.subject == "dppo"]
    assert finding.problem == "failed: DeliberateCrash: at step 1" and "recipe stage ablations" in finding.advice


def test_inert_arms_fail_the_ablations_gate_only_where_the_profile_sets_a_bar() -> None:
    arms = [ArmResult("baseline", True, None), ArmResult("dppo", True, None, idle=INERT_DPPO)]
    assert ablations_gate(arms, "baseline", "reason", {}).passed  # reported and never landed, not failed
    report = ablations_gate(arms, "baseline", "reason", {}, AblationsThresholds(max_inert_arms=0))
    [failed] = report.failed_criteria()
    assert (failed.name, failed.measured, failed.detail) == ("inert arms", 1, "dppo")


def test_an_arm_that_trained_exactly_as_the_baseline_is_a_finding() -> None:
    arms = [ArmResult("baseline", True, None), ArmResult("nudge", True, None, same_as_baseline=True)]
    [finding] = ablations_gate(arms, "baseline", "reason", {}).findings
    assert finding.subject == "nudge" and "trained exactly as the baseline did" in finding.problem
    assert "settings reach the trainer" in finding.advice


def test_a_transfer_regression_is_a_finding_naming_the_suite() -> None:
    suites = {
        "mcq": comparison(-0.4, -0.5, -0.3, Verdict.LOSS),
        "code_only": comparison(-0.02, -0.06, 0.02, Verdict.WITHIN_NOISE),
    }
    [finding] = transfer_gate(suites, TransferThresholds(max_regression=0.0), {}).findings
    assert finding.subject == "mcq" and "lost what the base could do" in finding.problem
    assert "Δ -0.400, CI [-0.500, -0.300]" in finding.problem and finding.rate == -0.4


def test_derisk_without_oracles_names_what_stood_in_and_what_was_not_checked() -> None:
    from flows.config import DeriskThresholds
    from flows.stage_gates import DeriskMeasured, derisk_gate

    servers = [{"world_id": "w1", "server": "git", "tools": 4, "seconds": 0.6, "error": None}]
    measured = DeriskMeasured(0, 0, 8, 0.0, [], 2, servers=servers, known_good_probes=7, judged_tasks=3)
    report = derisk_gate(measured, DeriskThresholds(), subset_size=2)
    names = [c.name for c in report.criteria]
    assert report.passed and "oracle pass rate" not in names
    assert names[:2] == ["MCP servers that start and list their tools", "known-good probe calls"]
    assert [line.split(":")[0] for line in report.not_checked] == ["oracle pass rate", "judge sanity"]
    assert "3 tasks have llm_judge criteria" in report.not_checked[1]
    broken = [{**servers[0], "error": "MCP server git: command 'x' not found"}]
    failed = derisk_gate(DeriskMeasured(0, 0, 0, 0.0, [], 0, servers=broken), DeriskThresholds(), subset_size=2)
    assert not failed.passed and failed.findings[0].subject == "server git"
    no_probes = derisk_gate(DeriskMeasured(0, 0, 8, 0.0, [], 2, servers=servers), DeriskThresholds(), subset_size=2)
    assert not no_probes.passed  # no known-good call ran: the tools were never shown to work


def _audited(first: bool, rejudged: list, empty: bool | None) -> dict:
    return {"criterion": "States 412.5", "answer": "412.5", "first": first, "rejudged": rejudged, "empty_passed": empty}


def test_derisk_judges_the_judge_on_its_audited_samples() -> None:
    from envs.judge_audit import JudgeAudit
    from flows.config import DeriskThresholds
    from flows.stage_gates import DeriskMeasured, derisk_gate

    def gate(audit: JudgeAudit | None, not_run: str = ""):
        measured = DeriskMeasured(4, 4, 8, 0.0, [], 2, judged_tasks=2, judge_audit=audit, judge_not_run=not_run)
        return derisk_gate(measured, DeriskThresholds(), subset_size=2)

    sound = gate(JudgeAudit(model="j", samples=[_audited(True, [True, True], False)] * 4))
    names = {c.name: c for c in sound.criteria}
    assert sound.passed and not sound.not_checked
    assert names["judge agrees with itself on re-judged samples"].measured == 1.0
    assert names["judge agrees with itself on re-judged samples"].detail == "8/8 re-judgements over 4 graded samples"
    # 1 of 8 re-judgements flips: 7/8 = 0.875 < 0.9
    flaky = gate(
        JudgeAudit(model="j", samples=[_audited(True, [True, False], False)] + [_audited(True, [True] * 2, False)] * 3)
    )
    assert not flaky.passed and "1 of 8 re-judgements" in flaky.findings[0].problem
    yes_man = gate(JudgeAudit(model="j", samples=[_audited(True, [True, True], True)] * 4))
    assert not yes_man.passed and yes_man.findings[0].subject == "judge j"
    assert "passes an empty answer" in yes_man.findings[0].problem
    down = gate(JudgeAudit(model="j", failures=["JudgeError: [connection] refused"]))
    assert not down.passed and down.findings[0].problem == "JudgeError: [connection] refused"
    never_asked = gate(JudgeAudit(model="j"))
    assert never_asked.passed and "none of the base's answers reached the judge" in never_asked.not_checked[0]
    no_judge = gate(None, "the profile names no judge: set judge.url and judge.model")
    assert no_judge.passed and "the profile names no judge" in no_judge.not_checked[0]
