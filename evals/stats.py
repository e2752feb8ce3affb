"""Evaluation statistics: unbiased pass@k and pass^k (per task and averaged over tasks), per-pass mean ± SE, run
summaries.

A run is ``n_tasks`` tasks × ``n_passes`` passes of ``TrialResult``. Per pass we take the share of tasks fully
solved (Pass@1) and the mean reward (share of rubric criteria met), then report mean ± SE over passes, as the
recipe does (``shared/RECIPE.md``, "Evaluation"). All functions are pure and numpy-only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evals.types import Estimate, Metric, Summary, TrialResult

# How many offending tasks an error message lists before it says "and N more".
_MAX_LISTED = 5


def _check_counts(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if k < 1:
        raise ValueError(f"need k >= 1, got k={k}")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021, the Codex paper).

    pass@k = 1 − C(n−c, k) / C(n, k), the chance that a random k-subset of the n samples holds a correct one.
    Computed in the numerically stable product form 1 − Π_{i=n−c+1..n} (1 − k/i), which never forms the huge
    binomials. When n − c < k every k-subset holds a correct sample, so the value is exactly 1.
    Raises ``ValueError`` when k > n (the estimator is undefined) or the counts are inconsistent.
    """
    _check_counts(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k from ``n`` samples of which ``c`` are correct (τ-bench, Yao et al. 2024).

    pass^k = C(c, k) / C(n, k), the chance that a random k-subset of the n samples is all correct, i.e. that k
    independent runs all succeed. Product form Π_{i=0..k−1} (c − i) / (n − i); it is 0 when c < k.
    Raises ``ValueError`` when k > n or the counts are inconsistent.
    """
    _check_counts(n, c, k)
    return math.prod((c - i) / (n - i) for i in range(k))


def mean_pass_at_k(passed_T: Sequence[Sequence[bool]], k: int = 1) -> float:
    """Pass@k of a task set: each task's unbiased pass@k (``pass_at_k``) averaged over the T tasks.

    mean pass@k = (1/T) Σ_t pass@k(n_t, c_t), where task t ran n_t samples of which c_t passed; for k = 1 that is
    (1/T) Σ_t c_t / n_t (RECIPE "Evaluation": unbiased pass@1 = c/n per task). Tasks may have different n_t: each
    weighs 1/T whatever its n_t. Raises ``ValueError`` for no tasks or a task with fewer than k samples.
    """
    if len(passed_T) == 0:  # len, not truth: a task × sample numpy array is welcome too
        raise ValueError("no tasks to average pass@k over")
    return float(np.mean([pass_at_k(len(passed), int(sum(passed)), k) for passed in passed_T]))


def estimate(values_P: Sequence[float] | np.ndarray) -> Estimate:
    """Mean ± std over passes of a per-pass metric; std with ddof=1 (``None`` for one pass), SE = std / sqrt(P)."""
    values = np.asarray(values_P, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"need a non-empty 1-D sequence of per-pass values, got shape {values.shape}")
    std = float(values.std(ddof=1)) if values.size > 1 else None
    return Estimate(mean=float(values.mean()), std=std, n=int(values.size))


@dataclass(frozen=True)
class TrialMatrix:
    """Validated trials as task × pass arrays: row t is ``task_ids[t]``, column p is ``pass_indices[p]``."""

    task_ids: tuple[str, ...]
    pass_indices: tuple[int, ...]
    passed_TP: np.ndarray
    rewards_TP: np.ndarray
    domains_T: tuple[str | None, ...]
    tiers_T: tuple[str | None, ...]

    def values_TP(self, metric: Metric) -> np.ndarray:
        """Per-trial values of ``metric``: 0/1 solved for Pass@1, the reward for mean reward."""
        return {Metric.PASS_AT_1: self.passed_TP.astype(float), Metric.MEAN_REWARD: self.rewards_TP}[metric]

    def rows(self, mask_T: np.ndarray) -> TrialMatrix:
        """The sub-matrix of the tasks where ``mask_T`` is true."""
        keep = np.flatnonzero(mask_T)
        return TrialMatrix(
            task_ids=tuple(self.task_ids[t] for t in keep),
            pass_indices=self.pass_indices,
            passed_TP=self.passed_TP[keep],
            rewards_TP=self.rewards_TP[keep],
            domains_T=tuple(self.domains_T[t] for t in keep),
            tiers_T=tuple(self.tiers_T[t] for t in keep),
        )


def short_list(items: Sequence[str]) -> str:
    """Items joined by commas, the first few only, for error messages."""
    shown = ", ".join(items[:_MAX_LISTED])
    return shown if len(items) <= _MAX_LISTED else f"{shown} and {len(items) - _MAX_LISTED} more"


def _single_label(task_id: str, field: str, labels: set[str | None]) -> str | None:
    # Domain and tier describe the task, so every pass of a task must agree on them.
    if len(labels) > 1:
        raise ValueError(f"task {task_id!r} has conflicting {field} values across passes: {sorted(map(str, labels))}")
    return next(iter(labels))


def trial_matrix(trials: Sequence[TrialResult]) -> TrialMatrix:
    """Group trials into task × pass arrays, rejecting input the statistics would silently get wrong.

    Errors (``ValueError``): no trials; a (task, pass) pair given twice; tasks that were not run in the same
    passes (a per-pass share would mix different task sets); a task whose domain or tier differs between passes.
    Rewards outside [0, 1] are already rejected by ``TrialResult``.
    """
    if not trials:
        raise ValueError("no trials to summarize")
    by_task: dict[str, dict[int, TrialResult]] = {}
    duplicates: list[str] = []
    for trial in trials:
        passes = by_task.setdefault(trial.task_id, {})
        if trial.pass_index in passes:
            duplicates.append(f"({trial.task_id!r}, pass {trial.pass_index})")
        passes[trial.pass_index] = trial
    if duplicates:
        raise ValueError(f"duplicate (task, pass) pairs: {short_list(duplicates)}")

    task_ids = tuple(sorted(by_task))
    reference = task_ids[0]
    pass_indices = tuple(sorted(by_task[reference]))
    unequal = [
        f"{task_id!r} has passes {sorted(by_task[task_id])}"
        for task_id in task_ids
        if tuple(sorted(by_task[task_id])) != pass_indices
    ]
    if unequal:
        raise ValueError(
            f"unequal passes per task: task {reference!r} has passes {list(pass_indices)} but {short_list(unequal)}"
        )

    grid = [[by_task[task_id][p] for p in pass_indices] for task_id in task_ids]
    return TrialMatrix(
        task_ids=task_ids,
        pass_indices=pass_indices,
        passed_TP=np.array([[trial.passed for trial in row] for row in grid], dtype=bool),
        rewards_TP=np.array([[trial.reward for trial in row] for row in grid], dtype=float),
        domains_T=tuple(_single_label(row[0].task_id, "domain", {t.domain for t in row}) for row in grid),
        tiers_T=tuple(_single_label(row[0].task_id, "tier", {t.tier for t in row}) for row in grid),
    )


def _breakdown(matrix: TrialMatrix, labels_T: tuple[str | None, ...]) -> dict[str, Summary]:
    groups = sorted({label for label in labels_T if label is not None})
    labels = np.array(labels_T, dtype=object)
    return {group: _summarize_matrix(matrix.rows(labels == group), breakdowns=False) for group in groups}


def _summarize_matrix(matrix: TrialMatrix, *, breakdowns: bool) -> Summary:
    n_tasks, n_passes = matrix.passed_TP.shape
    correct_T = matrix.passed_TP.sum(axis=1)
    ks = range(1, n_passes + 1)
    return Summary(
        n_tasks=n_tasks,
        n_passes=n_passes,
        pass_at_1=estimate(matrix.passed_TP.mean(axis=0)),
        mean_reward=estimate(matrix.rewards_TP.mean(axis=0)),
        pass_at_k={k: mean_pass_at_k(matrix.passed_TP, k) for k in ks},
        pass_hat_k={k: float(np.mean([pass_hat_k(n_passes, int(c), k) for c in correct_T])) for k in ks},
        by_domain=_breakdown(matrix, matrix.domains_T) if breakdowns else {},
        by_tier=_breakdown(matrix, matrix.tiers_T) if breakdowns else {},
    )


def summarize(trials: Sequence[TrialResult]) -> Summary:
    """Summarize a run: Pass@1 and mean reward as mean ± SE over passes, pass@k and pass^k for k = 1 … passes,
    and the same per domain and per tier. Input is validated by ``trial_matrix``."""
    return _summarize_matrix(trial_matrix(trials), breakdowns=True)
