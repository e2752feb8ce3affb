"""Tests for evals.stats: pass@k / pass^k against brute force, mean ± SE by hand, summaries, input validation."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from itertools import combinations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from evals.stats import estimate, mean_pass_at_k, pass_at_k, pass_hat_k, summarize, trial_matrix
from evals.types import Estimate, Metric, Summary, TrialResult


def _brute_force(n: int, c: int, k: int) -> tuple[float, float]:
    """Share of all k-subsets of n samples (c correct) with at least one / only correct samples."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_and_pass_hat_k_match_enumeration_of_all_subsets(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            any_correct, all_correct = _brute_force(n, c, k)
            assert pass_at_k(n, c, k) == pytest.approx(any_correct, abs=1e-12), (n, c, k)
            assert pass_hat_k(n, c, k) == pytest.approx(all_correct, abs=1e-12), (n, c, k)


def test_pass_at_k_edge_cases() -> None:
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k: every 3-subset holds a correct sample
    assert pass_at_k(5, 0, 2) == 0.0
    assert pass_at_k(4, 1, 1) == 0.25  # pass@1 is the plain success rate c / n
    assert pass_hat_k(5, 1, 2) == 0.0  # fewer correct samples than k
    assert pass_hat_k(5, 5, 5) == 1.0


def test_mean_pass_at_k_by_hand() -> None:
    # Task a: 1 of 2 passed (c/n = 1/2); task b: 3 of 4 (3/4); task c: 0 of 1 (0). pass@1 = (1/2 + 3/4 + 0) / 3 = 5/12,
    # not the pooled 4/7: each task weighs 1/3 whatever its sample count.
    groups = [[True, False], [True, True, False, True], [False]]
    assert mean_pass_at_k(groups) == pytest.approx(5 / 12, abs=1e-12)
    # k = 2 over a and b: pass@2(2, 1) = 1 − C(1,2)/C(2,2) = 1; pass@2(4, 3) = 1 − C(1,2)/C(4,2) = 1 → mean 1.
    assert mean_pass_at_k(groups[:2], k=2) == 1.0
    with pytest.raises(ValueError, match="no tasks"):
        mean_pass_at_k([])
    with pytest.raises(ValueError, match="exceeds the number of samples"):
        mean_pass_at_k(groups, k=2)  # task c has a single sample


@pytest.mark.parametrize(
    ("n", "c", "k", "message"), [(3, 1, 4, "exceeds"), (3, 4, 1, "0 <= c <= n"), (3, 1, 0, "k >= 1")]
)
def test_bad_counts_raise(n: int, c: int, k: int, message: str) -> None:
    for fn in (pass_at_k, pass_hat_k):
        with pytest.raises(ValueError, match=message):
            fn(n, c, k)


def test_pass_at_k_is_stable_where_binomials_overflow_floats() -> None:
    # C(2000, 300) has ~370 digits: the naive ratio in floats overflows, the product form does not.
    exact = 1 - Fraction(math.comb(2000 - 7, 300), math.comb(2000, 300))
    assert pass_at_k(2000, 7, 300) == pytest.approx(float(exact), rel=1e-12)
    assert pass_hat_k(2000, 1500, 300) == pytest.approx(float(Fraction(math.comb(1500, 300), math.comb(2000, 300))))


@st.composite
def _counts(draw: st.DrawFn) -> tuple[int, int, int]:
    n = draw(st.integers(1, 60))
    return n, draw(st.integers(0, n)), draw(st.integers(1, n))


@given(_counts())
def test_pass_at_k_properties(counts: tuple[int, int, int]) -> None:
    n, c, k = counts
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(float(1 - Fraction(math.comb(n - c, k), math.comb(n, k))), abs=1e-12)
    if c < n:
        assert pass_at_k(n, c + 1, k) >= value - 1e-12  # one more correct sample never hurts
    if k < n:
        assert pass_at_k(n, c, k + 1) >= value - 1e-12  # one more try never hurts


@given(_counts())
def test_pass_hat_k_properties(counts: tuple[int, int, int]) -> None:
    n, c, k = counts
    value = pass_hat_k(n, c, k)
    assert 0.0 <= value <= pass_at_k(n, c, k) + 1e-12  # all k pass ⇒ at least one passes
    if c < n:
        assert pass_hat_k(n, c + 1, k) >= value - 1e-12
    if k < n:
        assert pass_hat_k(n, c, k + 1) <= value + 1e-12  # all of more runs passing is harder


def test_estimate_mean_std_se_by_hand() -> None:
    # values 0.5, 0.5, 0.75: mean 7/12; squared deviations (1 + 1 + 4)/144, / (3 - 1) → std = sqrt(3)/12; SE = 1/12
    est = estimate([0.5, 0.5, 0.75])
    assert est.mean == pytest.approx(7 / 12)
    assert est.std == pytest.approx(math.sqrt(3) / 12)
    assert est.se == pytest.approx(1 / 12)
    assert est.n == 3
    single = estimate([0.4])
    assert (single.mean, single.std, single.se) == (0.4, None, None)
    with pytest.raises(ValueError, match="non-empty"):
        estimate([])
    with pytest.raises(ValidationError, match="exactly when n >= 2"):
        Estimate(mean=0.5, std=None, n=3)


# Four tasks × three passes (rows: tasks, columns: passes 0, 1, 2).
_PASSED = {"t1": (1, 1, 1), "t2": (1, 0, 1), "t3": (0, 1, 0), "t4": (0, 0, 1)}
_REWARD = {"t1": (1, 1, 1), "t2": (1, 0.5, 1), "t3": (0.25, 1, 0), "t4": (0, 0.5, 1)}
_DOMAIN = {"t1": "ib", "t2": "ib", "t3": "law", "t4": None}
_TIER = {"t1": "toy", "t2": "toy", "t3": "standard", "t4": "toy"}


def _trials() -> list[TrialResult]:
    return [
        TrialResult(
            task_id=t, pass_index=p, passed=bool(_PASSED[t][p]), reward=_REWARD[t][p], domain=_DOMAIN[t], tier=_TIER[t]
        )
        for t in _PASSED
        for p in range(3)
    ]


def test_summarize_by_hand() -> None:
    summary = summarize(_trials())
    assert (summary.n_tasks, summary.n_passes) == (4, 3)
    # Pass@1 per pass: 2/4, 2/4, 3/4 → mean 7/12, SE 1/12 (see test_estimate_mean_std_se_by_hand).
    assert summary.pass_at_1.mean == pytest.approx(7 / 12)
    assert summary.pass_at_1.se == pytest.approx(1 / 12)
    # Mean reward per pass: 2.25/4, 3/4, 3/4 → mean 0.6875; deviations −0.125, 0.0625, 0.0625 → var 0.01171875,
    # SE = sqrt(0.01171875 / 3) = 0.0625.
    assert summary.mean_reward.mean == pytest.approx(0.6875)
    assert summary.mean_reward.std == pytest.approx(math.sqrt(0.01171875))
    assert summary.mean_reward.se == pytest.approx(0.0625)
    # Correct passes per task c = 3, 2, 1, 1 of n = 3.
    # pass@2: 1, 1, 1 − C(2,2)/C(3,2) = 2/3, 2/3 → 5/6;  pass@3: 1 for every task with c ≥ 1.
    assert summary.pass_at_k == pytest.approx({1: 7 / 12, 2: 5 / 6, 3: 1.0})
    # pass^2: C(c,2)/C(3,2) = 1, 1/3, 0, 0 → 1/3;  pass^3: only t1 → 1/4.
    assert summary.pass_hat_k == pytest.approx({1: 7 / 12, 2: 1 / 3, 3: 1 / 4})


def test_summarize_breakdowns() -> None:
    summary = summarize(_trials())
    assert set(summary.by_domain) == {"ib", "law"}  # t4 has no domain: it counts only in the totals
    ib, law = summary.by_domain["ib"], summary.by_domain["law"]
    assert ib.n_tasks == 2
    assert ib.pass_at_1.mean == pytest.approx(5 / 6)  # per pass 1, 1/2, 1
    assert law.pass_at_1.mean == pytest.approx(1 / 3)
    assert law.pass_at_1.std == pytest.approx(math.sqrt(1 / 3))  # values 0, 1, 0
    assert ib.by_domain == {} and ib.by_tier == {}
    assert set(summary.by_tier) == {"toy", "standard"}
    assert summary.by_tier["toy"].n_tasks == 3
    assert summary.by_tier["standard"].mean_reward.mean == pytest.approx(1.25 / 3)


def test_summarize_ignores_input_order_and_round_trips_json() -> None:
    trials = _trials()
    random.Random(0).shuffle(trials)
    summary = summarize(trials)
    assert summary == summarize(_trials())
    assert summary.estimate(Metric.PASS_AT_1) == summary.pass_at_1
    assert Summary.model_validate_json(summary.model_dump_json()) == summary


def test_trial_matrix_values_by_metric() -> None:
    matrix = trial_matrix(_trials())
    assert matrix.task_ids == ("t1", "t2", "t3", "t4")
    assert matrix.values_TP(Metric.PASS_AT_1)[1].tolist() == [1.0, 0.0, 1.0]
    assert matrix.values_TP(Metric.MEAN_REWARD)[2].tolist() == [0.25, 1.0, 0.0]


def test_duplicate_task_pass_pairs_are_rejected() -> None:
    trials = [*_trials(), TrialResult(task_id="t2", pass_index=1, passed=True, reward=1.0)]
    with pytest.raises(ValueError, match=r"duplicate \(task, pass\) pairs: \('t2', pass 1\)"):
        summarize(trials)


def test_unequal_passes_are_rejected() -> None:
    trials = [tr for tr in _trials() if not (tr.task_id == "t3" and tr.pass_index == 2)]
    with pytest.raises(ValueError, match=r"unequal passes per task: .*'t3' has passes \[0, 1\]"):
        summarize(trials)


def test_conflicting_domain_is_rejected() -> None:
    trials = [
        tr.model_copy(update={"domain": "law"}) if tr.task_id == "t1" and tr.pass_index == 0 else tr for tr in _trials()
    ]
    with pytest.raises(ValueError, match="task 't1' has conflicting domain"):
        summarize(trials)


@pytest.mark.parametrize("reward", [1.5, -0.1, float("nan")])
def test_rewards_outside_unit_interval_are_rejected(reward: float) -> None:
    with pytest.raises(ValidationError, match="reward"):
        TrialResult(task_id="t1", pass_index=0, passed=False, reward=reward)


def test_no_trials_is_an_error() -> None:
    with pytest.raises(ValueError, match="no trials"):
        summarize([])
