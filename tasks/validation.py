"""Data validation at stage boundaries: Great Expectations suites over what a stage reads and writes.

Four suites, one per kind of record that crosses a boundary:

* ``task_set`` — the tasks a stage reads: unique ids, a prompt, a world, at least one criterion, a known split;
* ``trajectories`` — rollouts a stage wrote: token, loss-mask and logprob lists of equal length (TITO), the prompt
  inside the tokens, rewards in [0, 1], known stop reasons and error classes;
* ``train_steps`` — loop steps: increasing step numbers, rewards in [0, 1], a finite loss on every trained step;
* ``eval_results`` — eval trials: one per (suite, policy, task, pass), rewards in [0, 1].

``validate(suite, frame)`` raises ``ValidationFailed`` naming the suite and every expectation that broke (column and a
few offending values), so a stage fails on bad data instead of computing a gate from it. Great Expectations imports
in seconds: it is imported here, at stage boundaries only, never in a loop.

    validate(Suite.TRAJECTORIES, catalog.frame(TRAJECTORY_CHECK_SQL, ["derisk"]))
    validate_stage(catalog, Suite.TRAJECTORIES, "derisk")      # the same: the stage's rows of the suite's table
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import pandas as pd

from envs.types import ErrorClass, Split, StopReason
from tasks.catalog import Catalog


class Suite(StrEnum):
    TASK_SET = "task_set"
    TRAJECTORIES = "trajectories"
    TRAIN_STEPS = "train_steps"
    EVAL_RESULTS = "eval_results"


class ValidationFailed(Exception):
    """A suite did not hold; the message lists each broken expectation with a few unexpected values."""


@dataclass(frozen=True)
class SuiteResult:
    suite: Suite
    rows: int
    expectations: int


TRAJECTORY_CHECK_SQL = """
    SELECT task_id, reward, stop_reason, error_class, prompt_len, n_tokens, n_generated,
           len(tokens) AS tokens_len, len(loss_mask) AS loss_mask_len, len(logprobs) AS logprobs_len,
           coalesce(list_sum(loss_mask), 0) AS masked  -- an empty list (no token sampled) sums to NULL
    FROM trajectories WHERE stage = ?"""
"""The columns the trajectories suite checks, computed in DuckDB (the token lists never leave the catalog)."""
STAGE_ROWS_SQL: dict[Suite, str] = {
    Suite.TRAJECTORIES: TRAJECTORY_CHECK_SQL,
    Suite.TRAIN_STEPS: "SELECT * FROM train_steps WHERE stage = ?",
    Suite.EVAL_RESULTS: "SELECT * FROM evals WHERE stage = ?",
}
"""A stage's rows of the catalog table each suite checks (the task set is read from the data folder, not here)."""


def _expectations(suite: Suite) -> list[Any]:
    import great_expectations as gx

    e = gx.expectations
    between_0_1 = {"min_value": 0.0, "max_value": 1.0}
    suites: dict[Suite, Callable[[], list[Any]]] = {
        Suite.TASK_SET: lambda: [
            e.ExpectTableRowCountToBeBetween(min_value=1),
            e.ExpectColumnValuesToBeUnique(column="task_id"),
            e.ExpectColumnValuesToNotBeNull(column="prompt"),
            e.ExpectColumnValueLengthsToBeBetween(column="prompt", min_value=1),
            e.ExpectColumnValuesToNotBeNull(column="world_id"),
            e.ExpectColumnValuesToBeBetween(column="criteria", min_value=1),
            e.ExpectColumnValuesToBeInSet(column="split", value_set=[s.value for s in Split]),
        ],
        Suite.TRAJECTORIES: lambda: [
            e.ExpectTableRowCountToBeBetween(min_value=1),
            e.ExpectColumnPairValuesToBeEqual(column_A="tokens_len", column_B="loss_mask_len"),
            e.ExpectColumnPairValuesToBeEqual(column_A="tokens_len", column_B="logprobs_len"),
            e.ExpectColumnPairValuesToBeEqual(column_A="tokens_len", column_B="n_tokens"),
            e.ExpectColumnPairValuesToBeEqual(column_A="masked", column_B="n_generated"),
            e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="n_tokens", column_B="prompt_len", or_equal=True),
            e.ExpectColumnValuesToBeBetween(column="reward", **between_0_1),
            e.ExpectColumnValuesToBeInSet(column="stop_reason", value_set=[s.value for s in StopReason]),
            e.ExpectColumnValuesToBeInSet(column="error_class", value_set=[c.value for c in ErrorClass]),
        ],
        Suite.TRAIN_STEPS: lambda: [
            e.ExpectTableRowCountToBeBetween(min_value=1),
            e.ExpectCompoundColumnsToBeUnique(column_list=["run", "step"]),
            e.ExpectColumnValuesToBeBetween(column="step", min_value=1),
            e.ExpectColumnValuesToBeBetween(column="reward_mean", **between_0_1),
            e.ExpectColumnValuesToBeBetween(column="wall_s", min_value=0.0),
            e.ExpectColumnValuesToNotBeNull(column="trained_loss"),
        ],
        Suite.EVAL_RESULTS: lambda: [
            e.ExpectTableRowCountToBeBetween(min_value=1),
            e.ExpectCompoundColumnsToBeUnique(column_list=["suite", "policy", "task_id", "pass_index"]),
            e.ExpectColumnValuesToBeBetween(column="reward", **between_0_1),
            e.ExpectColumnValuesToBeBetween(column="pass_index", min_value=0),
        ],
    }
    return suites[suite]()


def _prepared(suite: Suite, frame: pd.DataFrame) -> pd.DataFrame:
    if suite is Suite.TRAIN_STEPS and "loss" in frame:
        # "a finite loss on every trained step": untrained steps (all groups tied) carry no loss, and that is fine.
        frame = frame.assign(trained_loss=frame["loss"].where(frame["trained"], 0.0))
    return frame


def validate(suite: Suite, frame: pd.DataFrame) -> SuiteResult:
    """Run ``suite`` on ``frame``; raise ``ValidationFailed`` listing every expectation that broke."""
    import great_expectations as gx

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False, "metric_calculations": False}
    asset = context.data_sources.add_pandas(suite.value).add_dataframe_asset("rows")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": _prepared(suite, frame)}
    )
    expectations = gx.ExpectationSuite(name=suite.value, expectations=_expectations(suite))
    outcome = batch.validate(expectations)
    if not outcome.success:
        broken = []
        for result in outcome.results:
            if result.success:
                continue
            kwargs = {k: v for k, v in result.expectation_config.kwargs.items() if k != "batch_id"}
            examples = (result.result or {}).get("partial_unexpected_list") or []
            count = (result.result or {}).get("unexpected_count")
            seen = f"; {count} unexpected, e.g. {examples[:3]}" if count else ""
            if result.exception_info and result.exception_info.get("raised_exception"):
                seen = f"; raised {result.exception_info.get('exception_message')}"
            broken.append(f"{result.expectation_config.type}({kwargs}){seen}")
        raise ValidationFailed(f"suite {suite.value!r} failed on {len(frame)} rows: " + " | ".join(broken))
    return SuiteResult(suite=suite, rows=len(frame), expectations=len(outcome.results))


def validate_stage(catalog: Catalog, suite: Suite, stage: str) -> SuiteResult:
    """Run ``suite`` on the stage's rows of the catalog table it checks (``STAGE_ROWS_SQL``)."""
    return validate(suite, catalog.frame(STAGE_ROWS_SQL[suite], [stage]))


def task_frame(tasks: list[Any]) -> pd.DataFrame:
    """The task-set suite's columns from ``TaskSpec`` objects."""
    return pd.DataFrame(
        [
            {
                "task_id": t.task_id,
                "prompt": t.prompt,
                "world_id": t.world_id,
                "criteria": len(t.rubric),
                "split": str(t.split),
            }
            for t in tasks
        ],
        columns=["task_id", "prompt", "world_id", "criteria", "split"],
    )
