"""The ablation stage's table (ablations.json, the explorer's stage table): activity columns, the inert verdict."""

from pathlib import Path

import pytest

from envs.harness.agent import HarnessConfig
from envs.harness.policy import PolicyHarness
from evals.types import Comparison, ComparisonMethod, Metric, Verdict
from flows.ablations import _arm_setups, _same_as_baseline, _table
from flows.config import AblationsStage
from flows.mechanisms import Idle
from flows.stage_gates import ArmResult
from flows.stage_work import TrainingSetup
from trainer.algorithms import AlgorithmConfig, MechanismActivity


def noise() -> Comparison:
    return Comparison(
        metric=Metric.MEAN_REWARD, method=ComparisonMethod.PAIRED_BOOTSTRAP, baseline_mean=0.5, candidate_mean=0.5,
        mean_diff=0.0, ci_low=0.0, ci_high=0.0, confidence=0.95, verdict=Verdict.WITHIN_NOISE, n_tasks=10,
    )  # fmt: skip


def test_rows_carry_each_arms_activity_and_an_inert_arm_reads_inert() -> None:
    inert = Idle("DPPO never acted (dppo_masked_share = 0)", "train off-policy", inert=True)
    arms = [
        ArmResult("baseline", True, None, 0.5, 0.01, activity=MechanismActivity(ratio_abs_dev_mean=0.01)),
        ArmResult("dppo", True, noise(), 0.5, 0.01, MechanismActivity(ratio_abs_dev_mean=0.01), ("DPPO",), inert),
        ArmResult("prompt_mean", False, None),
    ]
    base, dppo, failed = _table(arms, {}, {"prompt_mean": "RuntimeError: boom"}, "baseline")
    assert (base["verdict"], dppo["verdict"], failed["verdict"]) == ("baseline", "inert", "failed")
    assert dppo["mechanisms"] == "DPPO" and dppo["idle"] == "DPPO never acted (dppo_masked_share = 0)"
    assert (dppo["dppo_masked_share"], dppo["ratio_abs_dev_mean"], dppo["nudges_inserted"]) == (0.0, 0.01, 0)
    assert set(MechanismActivity.model_fields) <= set(failed) and failed["weights_vs_token_mean"] is None
    assert all(
        isinstance(v, str | int | float | bool) or v is None for row in (base, dppo, failed) for v in row.values()
    )


def test_arm_setups_are_the_profiles_algorithm_with_the_arms_changes() -> None:
    setups = _arm_setups(AlgorithmConfig(zero_variance_tol=0.5), AblationsStage())
    assert setups["baseline"].algorithm.policy_loss == "glm5" and setups["baseline"].algorithm.zero_variance_tol == 0.5
    assert setups["plus_overlong_filter"].algorithm.overlong_filter and setups["plus_overlong_filter"].context_nudge


def test_arms_whose_every_loss_equals_the_baselines_trained_as_the_baseline() -> None:
    # "same" differs in the 7th digit (threaded float sums of one computation), "other" in the 3rd
    baseline = (-0.059445224702358246, 0.25)
    losses = {"baseline": baseline, "same": (-0.05944519862532616, 0.25), "other": (-0.0596, 0.25), "crashed": ()}
    assert _same_as_baseline(losses, "baseline") == {"same"}
    assert _same_as_baseline({"same": (0.5,)}, "baseline") == set()  # no baseline to compare with: nothing claimed


def test_arms_train_with_the_stages_harness_changes_and_their_own_nudge() -> None:
    base = PolicyHarness(
        apps=("sheets",), harness=HarnessConfig(context_budget_tokens=1024), terminal_max_tokens_per_turn=384
    )
    setup = TrainingSetup(Path("base"), base, [], [], engine=None)  # type: ignore[arg-type]  # not used here
    tight = setup.training_settings(True, {"context_budget_tokens": 360, "context_nudge_threshold": 0.2})
    assert (tight.harness.context_budget_tokens, tight.harness.context_nudge_threshold) == (360, 0.2)
    assert tight.harness.context_nudge and tight.model_dump(exclude={"harness"}) == base.model_dump(exclude={"harness"})
    assert setup.training_settings(False).harness == base.harness  # no changes: the run's harness
    assert AblationsStage().harness == {}


@pytest.mark.parametrize(
    ("changes", "named"), [({"context_budget": 360}, "context_budget"), ({"max_turns": 0}, "max_turns")]
)
def test_an_arm_harness_change_that_is_no_harness_field_is_refused_by_name(changes, named) -> None:
    with pytest.raises(ValueError, match=named):
        AblationsStage(harness=changes)
