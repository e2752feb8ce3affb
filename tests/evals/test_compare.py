"""Tests for evals.compare: verdict rule, bootstrap coverage, paired runs, Welch's interval on the recipe's numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evals.compare import (
    one_sided_paired_test,
    paired_bootstrap_ci,
    paired_comparison,
    unpaired_comparison,
    verdict_for,
    welch_df,
)
from evals.stats import summarize
from evals.types import ComparisonMethod, Estimate, Metric, TrialResult, Verdict


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [
        (0.1, 0.5, Verdict.GAIN),
        (-0.5, -0.1, Verdict.LOSS),
        (-0.1, 0.1, Verdict.WITHIN_NOISE),
        (0.0, 0.3, Verdict.WITHIN_NOISE),
        (-0.3, 0.0, Verdict.WITHIN_NOISE),
    ],
)
def test_verdict_rule(low: float, high: float, verdict: Verdict) -> None:
    assert verdict_for(low, high) is verdict


def test_verdict_rejects_reversed_bounds() -> None:
    with pytest.raises(ValueError, match="out of order"):
        verdict_for(0.2, 0.1)


def test_bootstrap_ci_covers_zero_about_95_percent_without_effect() -> None:
    # 200 simulated paired experiments, 100 tasks each, true mean difference 0: a 95 % CI should cover 0 in
    # ~95 % of them (binomial SE over 200 runs ≈ 1.5 points; percentile bootstrap undercovers slightly).
    rng = np.random.default_rng(1)
    diffs_RT = rng.normal(0.0, 0.3, size=(200, 100))
    cis = [paired_bootstrap_ci(d, n_resamples=2000, seed=r) for r, d in enumerate(diffs_RT)]
    coverage = np.mean([low <= 0.0 <= high for low, high in cis])
    assert 0.90 <= coverage <= 0.99


def test_bootstrap_ci_covers_a_known_effect_and_calls_a_large_one_a_gain() -> None:
    rng = np.random.default_rng(4)
    small_RT = rng.normal(0.02, 0.3, size=(200, 100))  # true effect 0.02, far below the noise
    cis = [paired_bootstrap_ci(d, n_resamples=2000, seed=r) for r, d in enumerate(small_RT)]
    assert 0.90 <= np.mean([low <= 0.02 <= high for low, high in cis]) <= 0.99
    large_RT = rng.normal(0.3, 0.3, size=(20, 100))  # effect 0.3 = one noise std: SE 0.03, a 10-SE gain
    assert all(
        verdict_for(*paired_bootstrap_ci(d, n_resamples=2000, seed=r)) is Verdict.GAIN for r, d in enumerate(large_RT)
    )


def test_bootstrap_ci_width_matches_normal_theory() -> None:
    # For 400 tasks the percentile CI ≈ mean ± 1.96 · s / sqrt(T); a CI built from s instead of s/sqrt(T) would be
    # 20× wider.
    diffs = np.random.default_rng(2).normal(0.05, 0.2, size=400)
    low, high = paired_bootstrap_ci(diffs)
    expected = 2 * 1.96 * diffs.std(ddof=1) / math.sqrt(diffs.size)
    assert high - low == pytest.approx(expected, rel=0.1)
    assert low < diffs.mean() < high


def test_bootstrap_ci_is_seeded_and_degenerate_for_constant_differences() -> None:
    diffs = np.random.default_rng(3).normal(size=50)
    assert paired_bootstrap_ci(diffs, seed=7) == paired_bootstrap_ci(diffs, seed=7)
    assert paired_bootstrap_ci(diffs, seed=7) != paired_bootstrap_ci(diffs, seed=8)
    assert paired_bootstrap_ci([0.25] * 10) == pytest.approx((0.25, 0.25))


@pytest.mark.parametrize(
    ("diffs", "kwargs", "message"),
    [
        ([0.1], {}, "at least 2 tasks"),
        ([0.1, float("nan")], {}, "NaN"),
        ([0.1, 0.2], {"n_resamples": 0}, "n_resamples"),
        ([0.1, 0.2], {"confidence": 1.0}, "confidence"),
    ],
)
def test_bootstrap_bad_input(diffs: list[float], kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_bootstrap_ci(diffs, **kwargs)


def _run(rewards_TP: np.ndarray, prefix: str = "t") -> list[TrialResult]:
    return [
        TrialResult(task_id=f"{prefix}{t:03d}", pass_index=p, passed=bool(r == 1.0), reward=float(r))
        for t, row in enumerate(rewards_TP)
        for p, r in enumerate(row)
    ]


def _simulated_runs(effect: float, n_tasks: int = 120, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    # Tasks differ a lot in difficulty (shared by both runs); pairing removes that spread from the noise.
    rng = np.random.default_rng(seed)
    difficulty_T = rng.uniform(0.0, 1.0, size=(n_tasks, 1))
    base = np.clip(difficulty_T + rng.normal(0.0, 0.1, size=(n_tasks, 3)), 0.0, 1.0)
    cand = np.clip(difficulty_T + effect + rng.normal(0.0, 0.1, size=(n_tasks, 3)), 0.0, 1.0)
    return base, cand


def test_paired_comparison_large_effect_is_a_gain_and_reversed_a_loss() -> None:
    base, cand = _simulated_runs(effect=0.1)
    gain = paired_comparison(_run(base), _run(cand))
    assert gain.verdict is Verdict.GAIN
    assert gain.method is ComparisonMethod.PAIRED_BOOTSTRAP
    assert gain.n_tasks == 120
    assert gain.mean_diff == pytest.approx(cand.mean(axis=1).mean() - base.mean(axis=1).mean())
    assert gain.ci_low < gain.mean_diff < gain.ci_high
    assert paired_comparison(_run(cand), _run(base)).verdict is Verdict.LOSS


def test_paired_comparison_of_a_run_with_itself_is_within_noise() -> None:
    base, _ = _simulated_runs(effect=0.0)
    same = paired_comparison(_run(base), _run(base))
    assert (same.mean_diff, same.ci_low, same.ci_high, same.verdict) == (0.0, 0.0, 0.0, Verdict.WITHIN_NOISE)


def test_paired_comparison_pass_at_1_with_different_pass_counts() -> None:
    # Baseline: 3 passes, candidate: 2 passes. Per-task solve rates: base (1/3, 0, 1), cand (1, 1/2, 1).
    # Differences 2/3, 1/2, 0 → mean 7/18.
    base = _run(np.array([[1.0, 0.0, 0.5], [0.0, 0.5, 0.0], [1.0, 1.0, 1.0]]))
    cand = _run(np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]]))
    result = paired_comparison(base, cand, Metric.PASS_AT_1, n_resamples=500)
    assert result.metric is Metric.PASS_AT_1
    assert result.baseline_mean == pytest.approx(4 / 9)
    assert result.candidate_mean == pytest.approx(5 / 6)
    assert result.mean_diff == pytest.approx(7 / 18)


def test_paired_comparison_names_missing_tasks() -> None:
    rewards = np.full((3, 2), 0.5)
    base = _run(rewards)
    cand = [tr for tr in _run(rewards) if tr.task_id != "t001"] + _run(np.full((1, 2), 0.5), prefix="x")
    with pytest.raises(ValueError, match=r"missing from the candidate: t001; missing from the baseline: x000"):
        paired_comparison(base, cand)


# The recipe's ablation table (35B, mean reward %, 3 passes × 480 tasks, ± = std over passes).
_BASELINE = Estimate(mean=28.69, std=0.80, n=3)
_PROMPT_MEAN = Estimate(mean=32.54, std=1.19, n=3)


def test_welch_recipe_prompt_mean_beats_baseline() -> None:
    # v_b = 0.80²/3 = 0.21333, v_c = 1.19²/3 = 0.47203; se = sqrt(0.68537) = 0.82787;
    # df = 0.68537² / (0.21333²/2 + 0.47203²/2) = 0.46973 / 0.13416 = 3.501.
    assert welch_df(_BASELINE, _PROMPT_MEAN) == pytest.approx(3.501, abs=1e-3)
    result = unpaired_comparison(_BASELINE, _PROMPT_MEAN)
    assert result.mean_diff == pytest.approx(3.85)
    assert result.df == pytest.approx(3.501, abs=1e-3)
    # t_{0.975, 3.5} lies between t_{0.975, 4} = 2.776 and t_{0.975, 3} = 3.182.
    half_width = (result.ci_high - result.ci_low) / 2
    assert 2.776 * 0.82787 < half_width < 3.182 * 0.82787
    assert result.verdict is Verdict.GAIN


def test_welch_recipe_full_stack_vs_prompt_mean_is_within_noise() -> None:
    # The recipe gives DPPO + prompt_mean + nudge as 31.81 without a spread; we assume s = 1.0 over 3 passes.
    result = unpaired_comparison(_PROMPT_MEAN, Estimate(mean=31.81, std=1.0, n=3))
    assert result.mean_diff == pytest.approx(-0.73)
    assert result.ci_low < 0.0 < result.ci_high
    assert result.verdict is Verdict.WITHIN_NOISE


def test_welch_quantile_exact_for_two_degrees_of_freedom() -> None:
    # Two passes each with equal std: df = (2v)² / (v²/1 + v²/1) = 2 exactly. For ν = 2 the t quantile has the
    # closed form t_u = (2u − 1) / sqrt(2u(1 − u)); u = 0.975 → 4.302653.
    a, b = Estimate(mean=0.0, std=1.0, n=2), Estimate(mean=1.0, std=1.0, n=2)
    result = unpaired_comparison(a, b)
    assert result.df == pytest.approx(2.0)
    t = (2 * 0.975 - 1) / math.sqrt(2 * 0.975 * 0.025)
    assert result.ci_high - 1.0 == pytest.approx(t * 1.0, rel=1e-9)  # se = sqrt(1/2 + 1/2) = 1
    assert result.verdict is Verdict.WITHIN_NOISE


def test_welch_edge_cases() -> None:
    flat = unpaired_comparison(Estimate(mean=0.2, std=0.0, n=3), Estimate(mean=0.3, std=0.0, n=3))
    assert (flat.ci_low, flat.ci_high) == pytest.approx((0.1, 0.1))
    assert (flat.df, flat.verdict) == (None, Verdict.GAIN)
    with pytest.raises(ValueError, match="single pass"):
        unpaired_comparison(Estimate(mean=0.2, std=None, n=1), _BASELINE)
    with pytest.raises(ValueError, match="both stds are 0"):
        welch_df(Estimate(mean=0.2, std=0.0, n=3), Estimate(mean=0.3, std=0.0, n=3))


def test_unpaired_comparison_from_summaries() -> None:
    base, cand = _simulated_runs(effect=0.2, n_tasks=60)
    result = unpaired_comparison(
        summarize(_run(base)).estimate(Metric.MEAN_REWARD), summarize(_run(cand)).estimate(Metric.MEAN_REWARD)
    )
    assert result.method is ComparisonMethod.WELCH_T
    assert result.mean_diff == pytest.approx(cand.mean() - base.mean())
    assert result.verdict is Verdict.GAIN


def _runs(rewards_T: list[float], passes: int = 2) -> list[TrialResult]:
    return [
        TrialResult(task_id=f"t{t}", pass_index=p, passed=r == 1.0, reward=r)
        for t, r in enumerate(rewards_T)
        for p in range(passes)
    ]


def test_one_sided_paired_test_by_hand() -> None:
    # Per-task gains d = [0.2, 0.1, 0.3, 0.1]: mean 0.175, sd (ddof 1) = sqrt(0.0275 / 3) = 0.095743,
    # t = 0.175 / (0.095743 / 2) = 3.6556 on 3 df → one-sided p = 0.017676.
    gain, p = one_sided_paired_test(_runs([0.1, 0.2, 0.3, 0.4]), _runs([0.3, 0.3, 0.6, 0.5]))
    assert gain == pytest.approx(0.175) and p == pytest.approx(0.0176764, rel=1e-4)
    _, p_down = one_sided_paired_test(_runs([0.3, 0.3, 0.6, 0.5]), _runs([0.1, 0.2, 0.3, 0.4]))
    assert p_down == pytest.approx(1 - 0.0176764, rel=1e-4)


def test_one_sided_paired_test_with_no_spread_is_decided_by_the_sign() -> None:
    assert one_sided_paired_test(_runs([0.0, 0.5]), _runs([0.25, 0.75])) == (pytest.approx(0.25), 0.0)
    assert one_sided_paired_test(_runs([0.5, 0.5]), _runs([0.5, 0.5]))[1] == 1.0
    with pytest.raises(ValueError, match="different tasks"):
        one_sided_paired_test(_runs([0.5, 0.5]), _runs([0.5, 0.5, 0.5]))
