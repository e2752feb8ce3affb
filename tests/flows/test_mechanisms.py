"""Which mechanisms an ablation arm turns on relative to the baseline, and the idle / inert verdict on its activity."""

import pytest

from flows.config import recipe_arms
from flows.mechanisms import ACTIVITY_TOL, MECHANISMS, ArmSetup, arm_mechanisms, idle_mechanisms
from trainer.algorithms import AlgorithmConfig, MechanismActivity


def setups() -> dict[str, ArmSetup]:
    """The recipe's grid on the hero profile's algorithm, as the ablation stage resolves it."""
    profile = AlgorithmConfig().model_dump()
    return {
        name: ArmSetup(AlgorithmConfig(**profile | arm.algorithm), arm.context_nudge)
        for name, arm in recipe_arms().items()
    }


def names(arm: str) -> list[str]:
    grid = setups()
    return [m.name for m in arm_mechanisms(grid[arm], grid["baseline"])]


def test_every_mechanism_names_an_activity_figure() -> None:
    assert {m.metric for m in MECHANISMS} <= set(MechanismActivity.model_fields)


def test_the_recipe_grid_turns_on_its_mechanisms_relative_to_the_baseline() -> None:
    assert names("baseline") == []
    assert names("prompt_mean") == ["aggregation"]
    assert names("context_nudge") == ["context nudge"]
    assert names("dppo") == ["DPPO"]
    assert names("dppo_prompt_mean_nudge") == ["context nudge", "DPPO", "aggregation"]
    assert names("plus_overlong_filter") == ["context nudge", "DPPO", "overlong filter", "aggregation"]
    assert names("plus_length_penalty") == ["context nudge", "DPPO", "length penalty", "aggregation"]


def test_a_mechanism_the_baseline_already_has_or_token_mean_is_not_counted() -> None:
    dppo = ArmSetup(AlgorithmConfig(aggregation="token_mean"), context_nudge=True)
    # same loss and nudge as the baseline; back to token_mean from prompt_mean is not judged (its figure is vs it)
    assert arm_mechanisms(dppo, ArmSetup(AlgorithmConfig(), context_nudge=True)) == []
    alp = ArmSetup(AlgorithmConfig(alp_env_coef=1e-4), context_nudge=False)
    assert arm_mechanisms(alp, alp) == []
    assert [m.name for m in arm_mechanisms(alp, ArmSetup(AlgorithmConfig(), False))] == ["length penalty"]


def test_an_arm_none_of_whose_mechanisms_acted_is_inert() -> None:
    grid = setups()
    mechanisms = arm_mechanisms(grid["dppo_prompt_mean_nudge"], grid["baseline"])
    # on-policy: nothing masked (|π/μ − 1| is not the DPPO figure), no nudge, groups of equal length (TV ≈ round-off)
    quiet = MechanismActivity(ratio_abs_dev_mean=0.01, weights_vs_token_mean=ACTIVITY_TOL / 10)
    idle = idle_mechanisms(mechanisms, quiet)
    assert idle is not None and idle.inert
    assert idle.reason == (
        "context nudge never acted (nudges_inserted = 0); DPPO never acted (dppo_masked_share = 0); "
        "aggregation never acted (weights_vs_token_mean = 1e-07)"
    )
    assert "off-policy" in idle.advice and "context budget" in idle.advice


def test_an_arm_where_some_mechanisms_acted_has_them_idle_not_inert() -> None:
    grid = setups()
    mechanisms = arm_mechanisms(grid["plus_overlong_filter"], grid["baseline"])
    active = MechanismActivity(nudges_inserted=3, dppo_masked_share=0.02, weights_vs_token_mean=0.2)
    idle = idle_mechanisms(mechanisms, active)
    assert idle is not None and not idle.inert
    assert idle.reason == "overlong filter never acted (overlong_dropped_share = 0)"
    assert idle_mechanisms(mechanisms, active.model_copy(update={"overlong_dropped_share": 0.1})) is None


@pytest.mark.parametrize("activity", [None, MechanismActivity()])
def test_nothing_is_judged_without_mechanisms_or_measurements(activity) -> None:
    grid = setups()
    assert idle_mechanisms([], activity) is None  # the baseline, or an arm changing another knob
    assert idle_mechanisms(arm_mechanisms(grid["dppo"], grid["baseline"]), None) is None  # e.g. a SkyRL job
