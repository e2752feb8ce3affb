"""Mechanism activity: how much each switchable mechanism of the recipe changed one training step.

An ablation arm that turns a mechanism on measures something only if the mechanism acted; these numbers say whether
it did. Each is measured where the mechanism works, over one optimizer step's mini-batch of B trajectories (input),
of which B' are kept by the zero-variance filter, with loss mask m (after the overlong filter):

* ``nudges_inserted`` = Σ_i nudges_i over the B input trajectories (``Trajectory.nudges``: observations the harness
  appended the context notice to).
* ``dppo_masked_share`` = share of loss tokens the DPPO mask zeroed (``policy_loss``'s ``dppo_masked`` metric).
* ``ratio_abs_dev_mean`` = (1/Σm) Σ_{loss tokens} |π/μ − 1|, π/μ = exp(log π − log μ) (``policy_loss``'s
  ``ratio_abs_dev``): how far the step is from on-policy, what DPPO (and TIS) act on.
* ``overlong_dropped_share`` = n_overlong / B' (``overlong_dropped_share``).
* ``length_penalty_mean`` = (1/B) Σ_i penalty_i, the ALP penalty subtracted from each reward
  (``length_penalty_mean``).
* ``weights_vs_token_mean`` = TV(w, m): the total-variation distance between the configured aggregation's token
  weights and token_mean's (``weights_vs_token_mean``).

    stats = MechanismActivity(dppo_masked_share=0.02, weights_vs_token_mean=0.31)
    MechanismActivity.over_steps([stats, MechanismActivity(nudges_inserted=3)])  # nudges summed, shares averaged
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # the step record (MechanismActivity) is read where torch is not loaded: cluster job specs, reports
    import torch


def length_penalty_mean(penalty_B: torch.Tensor) -> float:
    """(1/B) Σ_i penalty_i: the mean penalty subtracted from a trajectory's reward (0 for an empty batch)."""
    return float(penalty_B.sum()) / max(penalty_B.numel(), 1)


def overlong_dropped_share(overlong_masked: int, trajectories_kept: int) -> float:
    """n_overlong / B': the share of the kept trajectories whose loss mask the overlong filter zeroed."""
    if not 0 <= overlong_masked <= trajectories_kept:
        raise ValueError(f"overlong_masked must be in [0, {trajectories_kept}], got {overlong_masked}")
    return overlong_masked / max(trajectories_kept, 1)


def weights_vs_token_mean(weights_BT: torch.Tensor, loss_mask_BT: torch.Tensor) -> float:
    """How far the aggregation's token weights are from token_mean's on the same loss mask, in [0, 1].

    With p = w / Σw (the weights as a distribution over loss tokens) and q = m / Σm (token_mean's: every loss token
    the same weight), TV(p, q) = ½ Σ_{i,t} |p_{i,t} − q_{i,t}|. 0 when the weightings agree (token_mean itself, or
    prompt_mean over groups of equal token counts); it approaches 1 as the weight leaves the tokens token_mean
    spreads it over. 0 for a batch without loss tokens or weights.
    """
    if weights_BT.shape != loss_mask_BT.shape:
        raise ValueError(f"weights_BT has shape {tuple(weights_BT.shape)}, loss_mask_BT {tuple(loss_mask_BT.shape)}")
    mask_BT = loss_mask_BT.double()
    weights_BT = weights_BT.double() * mask_BT
    weight_total, mask_total = float(weights_BT.sum()), float(mask_BT.sum())
    if weight_total <= 0 or mask_total <= 0:
        return 0.0
    return 0.5 * float((weights_BT / weight_total - mask_BT / mask_total).abs().sum())


class MechanismActivity(BaseModel):
    """One step's (or, ``over_steps``, a run's) mechanism activity; the formulas are in the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    SUMMED: ClassVar[frozenset[str]] = frozenset({"nudges_inserted"})
    """Counts add up over steps; every other figure is a per-step share or mean, averaged over steps."""

    nudges_inserted: int = 0
    """Context notices the harness appended to the step's rollouts."""
    dppo_masked_share: float = 0.0
    """Share of loss tokens the DPPO trust-region mask zeroed."""
    ratio_abs_dev_mean: float = 0.0
    """Mean |π/μ − 1| over loss tokens (train vs rollout policy)."""
    overlong_dropped_share: float = 0.0
    """Share of kept trajectories whose loss mask the overlong filter zeroed."""
    length_penalty_mean: float = 0.0
    """Mean adaptive length penalty subtracted per trajectory (reward units)."""
    weights_vs_token_mean: float = 0.0
    """Total-variation distance of the aggregation's token weights from token_mean's."""

    @classmethod
    def over_steps(cls, steps: Sequence[MechanismActivity]) -> MechanismActivity | None:
        """A run's activity: counts summed over ``steps``, shares and means averaged (each step weighing the same);
        None when no step measured any."""
        if not steps:
            return None
        totals = {name: sum(getattr(s, name) for s in steps) for name in cls.model_fields}
        return cls(**{name: total if name in cls.SUMMED else total / len(steps) for name, total in totals.items()})
