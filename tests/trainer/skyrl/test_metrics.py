"""SkyRL's console metric blocks → ``train_steps`` rows our catalog takes."""

import pprint

import pytest

from tasks.catalog import SCHEMA, Catalog
from trainer.skyrl.metrics import COLUMNS, metric_blocks, train_step_row, train_step_rows

PREFIX = "2026-07-20 10:00:0{i}.123 | INFO     | skyrl.train.utils.tracking:log:201 - "


def _block(step: int, metrics: dict) -> list[str]:
    """What SkyRL 0.3's console logger writes: ``Step N:`` then the dict, floats as 4-decimal strings."""
    shown = {k: f"{v:.4f}" if isinstance(v, float) else v for k, v in metrics.items()}
    return [PREFIX.format(i=step) + f"Step {step}: ", *pprint.pformat(shown).splitlines()]


STEP_1 = {
    "trainer/global_step": 1,
    "trainer/epoch": 1,
    "reward/avg_raw_reward": 0.28125,
    "reward/avg_pass_at_16": 0.75,
    "environment/pass_rate": 0.125,
    "generate/batch_num_seq": 256,
    "async/num_groups_dropped": 3,
    "async/staleness_mean": 0.5,
    "async/staleness_max": 2,
    "async/staleness_violation_count": 0,
    "timing/step": 41.5,
    "timing/train_critic_and_policy": 30.25,
    "timing/sync_weights": 4.0,
    "timing/wait_for_generation_buffer": 1.5,
    "policy/policy_loss": -0.0123,
    "policy/rollout_train_logprobs_abs_diff_mean": 0.0189,
    "trainer/tokens_per_second_per_gpu": 1234.5,
}
STEP_2 = {"trainer/global_step": 2, "reward/avg_raw_reward": 0.3125, "timing/step": 40.0}
EVAL_2 = {"eval/all/avg_score": 0.25, "eval/all/pass_rate": 0.1, "eval/all/pass_at_3": 0.4, "timing/eval": 9.0}


def _log() -> list[str]:
    return [
        "(pid=123) starting engines",
        *_block(1, STEP_1),
        "INFO some other line",
        *_block(2, STEP_2),
        *_block(2, EVAL_2),
        PREFIX.format(i=3) + "Step 3: ",  # a header without a dict: not a block
        "the run ended",
    ]


def test_blocks_are_found_between_other_lines_and_floats_read_back() -> None:
    blocks = metric_blocks(_log())
    assert [b.step for b in blocks] == [1, 2, 2]
    assert blocks[0].metrics["reward/avg_raw_reward"] == 0.2812  # the console logger keeps 4 decimals
    assert blocks[0].metrics["generate/batch_num_seq"] == 256


def test_numpy_and_torch_scalars_in_a_block_still_parse() -> None:
    lines = ["Step 4: ", "{'async/staleness_max': np.int64(3),", " 'policy/policy_loss': tensor(0.5)}"]
    assert metric_blocks(lines)[0].metrics == {"async/staleness_max": 3, "policy/policy_loss": 0.5}


def test_rows_map_skyrl_names_to_our_columns() -> None:
    rows = train_step_rows(metric_blocks(_log()), stage="hero", run="qwen36-35b-hero")
    assert [r["step"] for r in rows] == [1, 2]
    first, second = rows
    assert first == {
        "stage": "hero",
        "run": "qwen36-35b-hero",
        "step": 1,
        "wall_s": 41.5,
        "reward_mean": 0.2812,
        "pass_rate": 0.125,
        "trajectories": 256,
        "groups_dropped": 3,
        "groups_stale": 0,
        "train_s": 30.25,
        "sync_s": 4.0,
        "wait_s": 1.5,
        "staleness_mean": 0.5,
        "staleness_max": 2,
        "loss": -0.0123,
        "logprob_abs_diff_mean": 0.0189,
        "trained": True,
    }
    # step 2: train and eval blocks merged, wall time cumulative, no loss → not trained
    assert second["wall_s"] == 81.5 and second["eval_reward"] == 0.25 and second["eval_pass_rate"] == 0.1
    assert second["trained"] is False and "loss" not in second


def test_every_mapped_column_is_a_train_steps_column() -> None:
    columns = {part.strip().split()[0] for part in SCHEMA["train_steps"].split(",")}
    assert set(COLUMNS) | {"stage", "run", "step", "wall_s", "trained"} <= columns


def test_non_finite_values_are_left_out() -> None:
    assert train_step_row({"policy/policy_loss": float("nan"), "reward/avg_raw_reward": True}) == {"trained": False}


def test_the_catalog_ingests_the_rows(tmp_path) -> None:
    catalog = Catalog(tmp_path / "catalog.duckdb")
    rows = train_step_rows(metric_blocks(_log()), stage="hero", run="skyrl")
    assert catalog.append("train_steps", rows) == 2
    stored = catalog.query("SELECT step, reward_mean, loss, trained FROM train_steps ORDER BY step")
    assert stored[0] == pytest.approx({"step": 1, "reward_mean": 0.2812, "loss": -0.0123, "trained": True})
    assert stored[1]["loss"] is None and stored[1]["trained"] is False
