"""Compare two eval runs: is the candidate better than the baseline beyond noise?

Two ways, one verdict rule (``verdict_for``: "within noise" when the CI covers 0):

* ``paired_comparison`` — both runs' trials on the same tasks. Per task, average each run over its passes, take
  candidate − baseline, and bootstrap the mean of those differences over tasks (percentile CI). Pairing removes
  the task-difficulty spread from the noise, which is what makes a few-point gain detectable on 480 tasks.
* ``unpaired_comparison`` — only per-pass summaries exist (mean ± std over passes, like the recipe's ablation
  table). Welch's t-interval on the difference of the pass means; the t quantile comes from ``scipy.stats``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

from evals.stats import short_list, trial_matrix
from evals.types import Comparison, ComparisonMethod, Estimate, Metric, TrialResult, Verdict

# Cap on resamples × tasks drawn at once by the bootstrap (int64 indices: 32 MiB), so memory stays flat in T.
_BOOTSTRAP_CHUNK_ELEMENTS = 1 << 22


def verdict_for(ci_low: float, ci_high: float) -> Verdict:
    """``gain`` when the whole CI lies above 0, ``loss`` when below 0, otherwise ``within_noise`` (it covers 0)."""
    if ci_low > ci_high:
        raise ValueError(f"CI bounds out of order: low {ci_low} > high {ci_high}")
    if ci_low > 0.0:
        return Verdict.GAIN
    if ci_high < 0.0:
        return Verdict.LOSS
    return Verdict.WITHIN_NOISE


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def paired_bootstrap_ci(
    diffs_T: Sequence[float] | np.ndarray, *, n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of per-task differences.

    Resample the T tasks with replacement ``n_resamples`` times (seeded ``numpy.random.Generator``), take each
    resample's mean difference, and return its (1 − confidence)/2 and (1 + confidence)/2 quantiles
    (Efron & Tibshirani 1993, ch. 13).
    """
    _check_confidence(confidence)
    diffs = np.asarray(diffs_T, dtype=float)
    if diffs.ndim != 1 or diffs.size < 2:
        raise ValueError(f"need per-task differences for at least 2 tasks, got shape {diffs.shape}")
    if not np.all(np.isfinite(diffs)):
        raise ValueError("per-task differences contain NaN or infinity")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    rng = np.random.default_rng(seed)
    n_tasks = diffs.size
    chunk = max(1, _BOOTSTRAP_CHUNK_ELEMENTS // n_tasks)
    means = np.concatenate(
        [
            diffs[rng.integers(0, n_tasks, size=(min(chunk, n_resamples - start), n_tasks))].mean(axis=1)
            for start in range(0, n_resamples, chunk)
        ]
    )
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1.0 - alpha / 2])
    return float(low), float(high)


def paired_comparison(
    baseline: Sequence[TrialResult],
    candidate: Sequence[TrialResult],
    metric: Metric = Metric.MEAN_REWARD,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Comparison:
    """Paired comparison of two runs on the same tasks (candidate − baseline).

    Each run is validated by ``evals.stats.trial_matrix`` and reduced to a per-task mean over its own passes (the
    two runs may have different pass counts); the differences go to ``paired_bootstrap_ci``. Raises
    ``ValueError`` naming the tasks that only one run has.
    """
    base, cand = trial_matrix(baseline), trial_matrix(candidate)
    only_base = sorted(set(base.task_ids) - set(cand.task_ids))
    only_cand = sorted(set(cand.task_ids) - set(base.task_ids))
    if only_base or only_cand:
        missing = []
        if only_base:
            missing.append(f"missing from the candidate: {short_list(only_base)}")
        if only_cand:
            missing.append(f"missing from the baseline: {short_list(only_cand)}")
        raise ValueError(f"the runs cover different tasks; {'; '.join(missing)}")
    # trial_matrix sorts tasks, so equal task sets give aligned rows.
    base_T = base.values_TP(metric).mean(axis=1)
    cand_T = cand.values_TP(metric).mean(axis=1)
    low, high = paired_bootstrap_ci(cand_T - base_T, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return Comparison(
        metric=metric,
        method=ComparisonMethod.PAIRED_BOOTSTRAP,
        baseline_mean=float(base_T.mean()),
        candidate_mean=float(cand_T.mean()),
        mean_diff=float((cand_T - base_T).mean()),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        verdict=verdict_for(low, high),
        n_tasks=len(base.task_ids),
    )


def welch_df(baseline: Estimate, candidate: Estimate) -> float:
    """Welch–Satterthwaite degrees of freedom: (v_b + v_c)² / (v_b² / (n_b − 1) + v_c² / (n_c − 1)), v = s² / n."""
    var_b, var_c = _mean_variance(baseline, "baseline"), _mean_variance(candidate, "candidate")
    if var_b + var_c == 0.0:
        raise ValueError("both stds are 0: the Welch-Satterthwaite degrees of freedom are undefined")
    return (var_b + var_c) ** 2 / (var_b**2 / (baseline.n - 1) + var_c**2 / (candidate.n - 1))


def _mean_variance(est: Estimate, name: str) -> float:
    if est.std is None:
        raise ValueError(f"the {name} has a single pass: Welch's interval needs a std over at least 2 passes")
    return est.std**2 / est.n


def unpaired_comparison(
    baseline: Estimate, candidate: Estimate, metric: Metric = Metric.MEAN_REWARD, *, confidence: float = 0.95
) -> Comparison:
    """Welch's t-interval for candidate − baseline from per-pass summaries (mean ± std over passes).

    diff ± t_{(1+confidence)/2, df} · sqrt(s_b²/n_b + s_c²/n_c), df by Welch–Satterthwaite (``welch_df``).
    When both stds are 0 the interval collapses to the difference itself.
    """
    _check_confidence(confidence)
    se = math.sqrt(_mean_variance(baseline, "baseline") + _mean_variance(candidate, "candidate"))
    diff = candidate.mean - baseline.mean
    df = welch_df(baseline, candidate) if se > 0.0 else None
    half_width = float(scipy_stats.t.ppf((1.0 + confidence) / 2, df)) * se if df is not None else 0.0
    return Comparison(
        metric=metric,
        method=ComparisonMethod.WELCH_T,
        baseline_mean=baseline.mean,
        candidate_mean=candidate.mean,
        mean_diff=diff,
        ci_low=diff - half_width,
        ci_high=diff + half_width,
        confidence=confidence,
        verdict=verdict_for(diff - half_width, diff + half_width),
        df=df,
    )


def one_sided_paired_test(
    baseline: Sequence[TrialResult], candidate: Sequence[TrialResult], metric: Metric = Metric.MEAN_REWARD
) -> tuple[float, float]:
    """(mean per-task gain, one-sided p) for H1: candidate > baseline, by a paired t-test over tasks.

    Each run is reduced to per-task means over its passes (as ``paired_comparison`` does); the t statistic is
    mean(d) / (std(d, ddof=1) / sqrt(T)) on T − 1 degrees of freedom (Student 1908; ``scipy.stats.ttest_rel`` with
    ``alternative="greater"``). When every difference is the same, the spread is 0 and the test is decided by the
    sign: p = 0 for a positive gain, else 1. Needs at least 2 shared tasks.
    """
    base, cand = trial_matrix(baseline), trial_matrix(candidate)
    if base.task_ids != cand.task_ids:
        raise ValueError("the runs cover different tasks; a paired test needs the same ones")
    if len(base.task_ids) < 2:
        raise ValueError(f"a paired test needs at least 2 tasks, got {len(base.task_ids)}")
    diffs_T = cand.values_TP(metric).mean(axis=1) - base.values_TP(metric).mean(axis=1)
    gain = float(diffs_T.mean())
    if np.allclose(diffs_T, diffs_T[0]):
        return gain, 0.0 if gain > 0 else 1.0
    p = float(scipy_stats.ttest_1samp(diffs_T, 0.0, alternative="greater").pvalue)
    return gain, p
