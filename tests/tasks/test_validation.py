"""Great Expectations suites at stage boundaries: good data passes, bad data fails naming the expectation."""

import pandas as pd
import pytest

from tasks.validation import Suite, ValidationFailed, validate


def test_trajectories_suite_catches_a_misaligned_loss_mask() -> None:
    good = {
        "task_id": ["a", "b"], "reward": [0.0, 1.0], "stop_reason": ["stop", "length"], "error_class": [None, "model"],
        "prompt_len": [2, 3], "n_tokens": [5, 6], "n_generated": [3, 3], "tokens_len": [5, 6],
        "loss_mask_len": [5, 6], "logprobs_len": [5, 6], "masked": [3, 3],
    }  # fmt: skip
    assert validate(Suite.TRAJECTORIES, pd.DataFrame(good)).expectations == 9
    bad = good | {"loss_mask_len": [5, 7], "reward": [0.0, 1.5]}
    with pytest.raises(ValidationFailed) as failure:
        validate(Suite.TRAJECTORIES, pd.DataFrame(bad))
    message = str(failure.value)
    assert "expect_column_pair_values_to_be_equal({'column_A': 'tokens_len', 'column_B': 'loss_mask_len'" in message
    assert "expect_column_values_to_be_between({'column': 'reward'" in message and "[1.5]" in message


def test_train_steps_suite_wants_a_loss_on_trained_steps_only() -> None:
    steps = {"run": ["a", "a"], "step": [1, 2], "reward_mean": [0.2, 0.4], "wall_s": [1.0, 2.0], "loss": [None, 0.3]}
    validate(Suite.TRAIN_STEPS, pd.DataFrame(steps | {"trained": [False, True]}))
    with pytest.raises(ValidationFailed, match="trained_loss"):
        validate(Suite.TRAIN_STEPS, pd.DataFrame(steps | {"trained": [True, True]}))
    with pytest.raises(ValidationFailed, match="expect_compound_columns_to_be_unique"):
        validate(Suite.TRAIN_STEPS, pd.DataFrame(steps | {"step": [1, 1], "trained": [False, True]}))


def test_eval_results_suite_wants_one_trial_per_task_and_pass() -> None:
    rows = {
        "suite": ["s", "s"],
        "policy": ["p", "p"],
        "task_id": ["x", "x"],
        "pass_index": [0, 0],
        "reward": [0.5, 1.0],
    }
    with pytest.raises(ValidationFailed, match="suite 'eval_results' failed on 2 rows"):
        validate(Suite.EVAL_RESULTS, pd.DataFrame(rows))


def test_task_set_suite() -> None:
    tasks = {
        "task_id": ["a", "b"],
        "prompt": ["p", ""],
        "world_id": ["w", "w"],
        "criteria": [1, 0],
        "split": ["train", "x"],
    }
    with pytest.raises(ValidationFailed) as failure:
        validate(Suite.TASK_SET, pd.DataFrame(tasks))
    assert all(column in str(failure.value) for column in ("'prompt'", "'criteria'", "'split'"))


def test_a_rollout_that_failed_before_sampling_passes_the_trajectories_suite(tmp_path) -> None:
    """Its token lists are empty, and DuckDB sums an empty list to NULL: read as 0 generated tokens, not a mismatch
    (a TITO stage whose team servers timed out at start once failed validation on it instead of reporting them)."""
    from tasks.catalog import Catalog
    from tasks.validation import validate_stage

    catalog = Catalog(tmp_path / "c.duckdb")
    row = {"stage": "s", "source": "x", "task_id": "a", "reward": 0.0, "stop_reason": "error"}
    row |= {"error_class": "retryable_infra", "prompt_len": 0, "n_tokens": 0, "n_generated": 0}
    catalog.append("trajectories", [row | {"id": 1, "tokens": [], "loss_mask": [], "logprobs": []}])
    assert validate_stage(catalog, Suite.TRAJECTORIES, "s").rows == 1
