"""Contracts of the evaluation layer: read this module first, import it everywhere.

* ``TrialResult`` — one graded rollout of one task in one eval pass (the unit every statistic starts from).
* ``Estimate`` — a metric measured once per pass: mean ± std (and SE) over passes.
* ``Summary`` — what ``evals.stats.summarize`` returns for a run: Pass@1, mean reward, pass@k, pass^k, and the
  same per domain and per tier.
* ``Comparison`` — what ``evals.compare`` returns for two runs: candidate − baseline with a CI and a ``Verdict``.

Example::

    trials = [
        TrialResult(task_id="ib-0001", pass_index=p, passed=p != 2, reward=1.0 if p != 2 else 0.5,
                    domain="investment_banking", tier="toy")
        for p in range(3)
    ]
    summary = summarize(trials)          # summary.pass_at_1.mean == 2 / 3, summary.n_passes == 3
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator


class Verdict(StrEnum):
    """How a candidate run compares with a baseline: the CI lies above 0, covers 0, or lies below 0."""

    GAIN = "gain"
    WITHIN_NOISE = "within_noise"
    LOSS = "loss"


class Metric(StrEnum):
    """The per-pass metrics of the recipe: share of tasks fully solved, share of rubric criteria met."""

    PASS_AT_1 = "pass_at_1"
    MEAN_REWARD = "mean_reward"


class ComparisonMethod(StrEnum):
    PAIRED_BOOTSTRAP = "paired_bootstrap"
    WELCH_T = "welch_t"


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Output(BaseModel):
    # Outputs carry computed fields in their dumps; ignoring extras lets a dump validate back into the model.
    model_config = ConfigDict(extra="ignore", frozen=True)


class TrialResult(_Input):
    """One graded rollout: task ``task_id`` in eval pass ``pass_index``.

    ``passed`` means every rubric criterion was met; ``reward`` is the share of criteria met (APEX-style).
    """

    task_id: str = Field(min_length=1)
    pass_index: int = Field(ge=0)
    passed: bool
    reward: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    domain: str | None = None
    tier: str | None = None


class Estimate(_Output):
    """A metric measured once per pass: ``mean`` ± ``std`` over ``n`` passes.

    ``std`` uses ddof=1 and is ``None`` for a single pass (no spread can be measured from one value);
    ``se`` = std / sqrt(n).
    """

    mean: float
    std: float | None = Field(ge=0.0)
    n: int = Field(ge=1)

    @model_validator(mode="after")
    def _std_matches_n(self) -> Estimate:
        if (self.std is None) != (self.n == 1):
            raise ValueError(f"std must be given exactly when n >= 2 (got n={self.n}, std={self.std})")
        return self

    @computed_field
    @property
    def se(self) -> float | None:
        return None if self.std is None else self.std / math.sqrt(self.n)


class Summary(_Output):
    """A run over ``n_tasks`` tasks × ``n_passes`` passes.

    ``pass_at_1`` and ``mean_reward`` are per-pass shares, reported as mean ± std/SE over passes.
    ``pass_at_k[k]`` is the unbiased pass@k (at least one of k passes solves the task) and ``pass_hat_k[k]`` the
    unbiased pass^k (all k passes solve it), each averaged over tasks, for k = 1 … n_passes.
    ``by_domain`` / ``by_tier`` hold the same summary over each group's tasks (tasks without a domain / tier count
    only in the totals); the breakdown summaries have empty breakdowns themselves.
    """

    n_tasks: int = Field(ge=1)
    n_passes: int = Field(ge=1)
    pass_at_1: Estimate
    mean_reward: Estimate
    pass_at_k: dict[int, float]
    pass_hat_k: dict[int, float]
    by_domain: dict[str, Summary] = Field(default_factory=dict)
    by_tier: dict[str, Summary] = Field(default_factory=dict)

    def estimate(self, metric: Metric) -> Estimate:
        return {Metric.PASS_AT_1: self.pass_at_1, Metric.MEAN_REWARD: self.mean_reward}[metric]


class Comparison(_Output):
    """Candidate − baseline on one metric, with a ``confidence`` CI [``ci_low``, ``ci_high``] and its verdict.

    ``n_tasks`` is set for the paired bootstrap (the shared tasks), ``df`` for Welch's t-interval.
    """

    metric: Metric
    method: ComparisonMethod
    baseline_mean: float
    candidate_mean: float
    mean_diff: float
    ci_low: float
    ci_high: float
    confidence: float = Field(gt=0.0, lt=1.0)
    verdict: Verdict
    n_tasks: int | None = None
    df: float | None = None
