"""Which of the recipe's mechanisms an ablation arm turns on, the activity figure that shows each one acted, and the
inert verdict.

An arm measures its mechanism only if the mechanism acted while it trained: a context nudge that never fired, a DPPO
mask that never masked a token (on-policy, π/μ ≈ 1) or an overlong filter with nothing truncated leaves the arm
training exactly as its reference arm, and its score differs only by noise, or not at all. The ablation stage
reports such an arm as **inert**, never as a gain or "within noise", and never lands it.

``MECHANISMS`` maps each mechanism to the arm setting that turns it on relative to the baseline arm and to the
``trainer.algorithms.MechanismActivity`` figure, over the arm's training steps, that shows it acted:

===============  ==================================================  ===============================================
mechanism        on in an arm when, compared with the baseline arm   acted when (``ACTIVITY_TOL`` = 1e-6)
===============  ==================================================  ===============================================
context nudge    ``context_nudge`` on, off in the baseline            nudges_inserted > tol (summed over steps)
DPPO             ``policy_loss`` dppo_*, another in the baseline      dppo_masked_share > tol (mean over steps)
overlong filter  ``overlong_filter`` on, off in the baseline          overlong_dropped_share > tol
length penalty   an ALP coefficient > 0, other than the baseline's    length_penalty_mean > tol
aggregation      ``aggregation`` not token_mean, nor the baseline's   weights_vs_token_mean > tol
===============  ==================================================  ===============================================

An arm is inert when it turns on at least one mechanism, its activity was measured, and none of its mechanisms
acted; when only some never acted, they are reported as idle (the arm still measures the others). An arm that turns
on no mechanism of this table (it changes another knob, or turns one off) is not judged. The tolerance sits above
the round-off of figures that are exactly 0 when idle (float32 token weights put the TV distance of two identical
weightings near 1e-7) and below any real activity (one masked token in a million).

    mechanisms = arm_mechanisms(ArmSetup(dppo_config, True), ArmSetup(baseline_config, False))  # DPPO, nudge
    idle = idle_mechanisms(mechanisms, history.activity())  # None when both acted; idle.inert when neither did
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainer.algorithms import Aggregation, AlgorithmConfig, MechanismActivity, PolicyLoss

ACTIVITY_TOL = 1e-6
"""A mechanism acted when its activity figure exceeds this."""
DPPO_LOSSES = frozenset({PolicyLoss.DPPO_BINARY_TV, PolicyLoss.DPPO_BINARY_KL})


@dataclass(frozen=True)
class ArmSetup:
    """What an arm trains with: its whole algorithm config (the profile's with the arm's changes) and the nudge."""

    algorithm: AlgorithmConfig
    context_nudge: bool


def _nudge_on(arm: ArmSetup, baseline: ArmSetup) -> bool:
    return arm.context_nudge and not baseline.context_nudge


def _dppo_on(arm: ArmSetup, baseline: ArmSetup) -> bool:
    return arm.algorithm.policy_loss in DPPO_LOSSES and arm.algorithm.policy_loss != baseline.algorithm.policy_loss


def _overlong_on(arm: ArmSetup, baseline: ArmSetup) -> bool:
    return arm.algorithm.overlong_filter and not baseline.algorithm.overlong_filter


def _alp(setup: ArmSetup) -> tuple[float, float]:
    return setup.algorithm.alp_assistant_coef, setup.algorithm.alp_env_coef


def _length_penalty_on(arm: ArmSetup, baseline: ArmSetup) -> bool:
    return any(_alp(arm)) and _alp(arm) != _alp(baseline)


def _aggregation_on(arm: ArmSetup, baseline: ArmSetup) -> bool:
    """The figure is the distance from token_mean's weights, so only an aggregation other than token_mean is judged."""
    aggregation = arm.algorithm.aggregation
    return aggregation != baseline.algorithm.aggregation and aggregation != Aggregation.TOKEN_MEAN


@dataclass(frozen=True)
class Mechanism:
    name: str
    metric: str
    """The ``MechanismActivity`` field that shows it acted."""
    turned_on: Callable[[ArmSetup, ArmSetup], bool]
    """(arm, baseline arm) → whether the arm turns the mechanism on relative to the baseline."""
    advice: str
    """What makes it act, for an arm where it never did."""


MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism(
        "context nudge",
        "nudges_inserted",
        _nudge_on,
        "no rollout came within context_nudge_threshold of the context budget: give the profile tasks that reach it "
        "(longer tasks, or a smaller context_budget_tokens)",
    ),
    Mechanism(
        "DPPO",
        "dppo_masked_share",
        _dppo_on,
        "no token's probability moved past δ from the rollout's: train off-policy (the async loop with staleness) or "
        "for more steps, so π leaves μ's trust region",
    ),
    Mechanism(
        "overlong filter",
        "overlong_dropped_share",
        _overlong_on,
        "no kept trajectory was truncated: let some rollouts hit max_tokens_per_turn, max_turns or the context budget",
    ),
    Mechanism(
        "length penalty",
        "length_penalty_mean",
        _length_penalty_on,
        "the penalty rounds to 0 at these coefficients and lengths: raise alp_assistant_coef / alp_env_coef",
    ),
    Mechanism(
        "aggregation",
        "weights_vs_token_mean",
        _aggregation_on,
        "its token weights equal token_mean's (every prompt group had as many loss tokens): let lengths vary",
    ),
)


@dataclass(frozen=True)
class Idle:
    """The mechanisms of an arm that never acted, with their idle figures and what would make them act."""

    reason: str
    """E.g. "context nudge never acted (nudges_inserted = 0)"; one clause per idle mechanism, joined by "; "."""
    advice: str
    inert: bool
    """Every mechanism the arm turns on is idle: the arm measures nothing."""


def arm_mechanisms(arm: ArmSetup, baseline: ArmSetup) -> list[Mechanism]:
    """The mechanisms ``arm`` turns on relative to ``baseline``, in ``MECHANISMS`` order."""
    return [m for m in MECHANISMS if m.turned_on(arm, baseline)]


def acted(mechanism: Mechanism, activity: MechanismActivity) -> bool:
    return getattr(activity, mechanism.metric) > ACTIVITY_TOL


def idle_mechanisms(mechanisms: Sequence[Mechanism], activity: MechanismActivity | None) -> Idle | None:
    """Which of an arm's ``mechanisms`` never acted over its training (``activity``), and whether that is all of them
    (inert); None when every one acted, the arm turns none on, or its activity was not measured."""
    if activity is None:
        return None
    idle = [m for m in mechanisms if not acted(m, activity)]
    if not idle:
        return None
    reason = "; ".join(f"{m.name} never acted ({m.metric} = {getattr(activity, m.metric):.3g})" for m in idle)
    return Idle(reason=reason, advice="; ".join(m.advice for m in idle), inert=len(idle) == len(mechanisms))
