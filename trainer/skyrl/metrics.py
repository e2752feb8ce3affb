"""SkyRL's metrics as our catalog's ``train_steps`` rows: parse the console logger's blocks, map the names.

With ``trainer.logger=console`` SkyRL 0.3.x logs each step's metrics dict as a line ending ``Step N:`` followed by
the dict, pretty-printed over one or more lines, floats as 4-decimal strings. ``metric_blocks`` finds those blocks in
a job's log (other lines are skipped); ``train_step_rows`` merges the blocks of each step and maps SkyRL's names to
the ``train_steps`` columns (``tasks.catalog``) through ``COLUMNS``. Pure functions, no SkyRL import.

    blocks = metric_blocks(log_text.splitlines())
    rows = train_step_rows(blocks, stage="hero", run="qwen36-35b-hero")
    catalog.append("train_steps", rows)
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_HEADER = re.compile(r"\bStep (\d+):\s*$")
_SCALAR_REPR = re.compile(r"\b(?:np\.|numpy\.)?(?:float|int|uint|bool_?)\d*\(([^()]*)\)|\btensor\(([^()]*)\)")
"""A numpy or torch scalar's repr (``np.int64(3)``, ``tensor(0.5)``): the console logger stringifies only floats."""
MAX_BLOCK_LINES = 5000
"""A block that has not closed after this many lines is dropped (a truncated log)."""


@dataclass(frozen=True)
class MetricBlock:
    step: int
    metrics: dict[str, Any]


def _number(value: Any) -> Any:
    """The console logger writes floats as strings (``'0.1234'``); read them back as floats."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _scalar(match: re.Match[str]) -> str:
    return match.group(1) if match.group(1) is not None else match.group(2)


def metric_blocks(lines: Iterable[str]) -> list[MetricBlock]:
    """Every ``Step N:`` + dict block in ``lines``, in order (values that were float strings become floats)."""
    blocks: list[MetricBlock] = []
    step: int | None = None
    body: list[str] = []
    for line in lines:
        header = _HEADER.search(line)
        if header:
            step, body = int(header.group(1)), []
            continue
        if step is None:
            continue
        if not body and not line.lstrip().startswith("{"):
            step = None  # a "Step N:" line without a dict after it (some other message)
            continue
        body.append(line)
        try:
            parsed = ast.literal_eval(_SCALAR_REPR.sub(_scalar, "\n".join(body).strip()))
        except (SyntaxError, ValueError):
            if len(body) >= MAX_BLOCK_LINES:
                step = None
            continue
        if isinstance(parsed, dict):
            blocks.append(MetricBlock(step, {str(k): _number(v) for k, v in parsed.items()}))
        step = None
    return blocks


# --- SkyRL's names → our train_steps columns -------------------------------------------------------------------------

COLUMNS: dict[str, tuple[str, ...]] = {
    "reward_mean": ("reward/avg_raw_reward",),
    # Ours: share of rollouts fully solved, logged by our generator as a rollout metric (SkyRL prefixes those with
    # "environment/"); SkyRL's own reward/avg_pass_at_n is a per-prompt "any sample positive" rate, not this.
    "pass_rate": ("environment/pass_rate",),
    "trajectories": ("generate/batch_num_seq",),
    # Zero-variance groups: dropped and refilled in fully-async sample_full_batch mode, else loss-masked.
    "groups_dropped": ("async/num_groups_dropped", "reward/num_zero_variance_filtered"),
    # SkyRL counts the groups past the staleness bound (it trains on them; ours drops them).
    "groups_stale": ("async/staleness_violation_count",),
    "generate_s": ("timing/generate",),
    "train_s": ("timing/train_critic_and_policy", "timing/policy_train"),
    "sync_s": ("timing/sync_weights",),
    "wait_s": ("timing/wait_for_generation_buffer",),
    "staleness_mean": ("async/staleness_mean",),
    "staleness_max": ("async/staleness_max",),
    "loss": ("policy/policy_loss", "policy/final_loss"),
    "logprob_abs_diff_mean": ("policy/rollout_train_logprobs_abs_diff_mean",),
    "eval_reward": ("eval/all/avg_score",),
    "eval_pass_rate": ("eval/all/pass_rate",),
}
"""Column → SkyRL metric names, first present wins. Not mapped: ``tokens_per_s`` (ours counts generated tokens per
wall second; SkyRL's ``trainer/tokens_per_second_per_gpu`` is training throughput per GPU)."""
STEP_TIME = "timing/step"
"""Seconds of one trainer step; ``wall_s`` is their running sum."""
INTEGER_COLUMNS = frozenset({"trajectories", "groups_dropped", "groups_stale", "staleness_max"})


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _merged(blocks: Sequence[MetricBlock]) -> dict[int, dict[str, Any]]:
    """Blocks of the same step (train metrics, then eval metrics) merged, later values winning."""
    steps: dict[int, dict[str, Any]] = {}
    for block in blocks:
        steps.setdefault(int(block.metrics.get("trainer/global_step", block.step)), {}).update(block.metrics)
    return steps


def train_step_row(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """One step's SkyRL metrics → the ``train_steps`` columns they determine (absent ones are left out)."""
    row: dict[str, Any] = {}
    for column, names in COLUMNS.items():
        value = next((v for v in (_finite(metrics.get(n)) for n in names) if v is not None), None)
        if value is not None:
            row[column] = int(value) if column in INTEGER_COLUMNS else value
    row["trained"] = "loss" in row
    return row


def train_step_rows(blocks: Sequence[MetricBlock], stage: str, run: str) -> list[dict[str, Any]]:
    """Rows for ``catalog.append("train_steps", rows)``: one per step ≥ 1, in step order, ``wall_s`` cumulative."""
    rows, wall = [], 0.0
    for step, metrics in sorted(_merged(blocks).items()):
        if step < 1:
            continue  # eval before training (step 0) belongs to no train step
        wall += _finite(metrics.get(STEP_TIME)) or 0.0
        rows.append({"stage": stage, "run": run, "step": step, "wall_s": wall} | train_step_row(metrics))
    return rows
