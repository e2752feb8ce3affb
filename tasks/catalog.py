"""The run's catalog: a DuckDB file (``runs/<run_id>/catalog.duckdb``) every stage appends its records to.

Tables (one row per ...):

* ``trajectories`` — rollout: stage, source (what produced it: ``base-rollouts``, ``overfit``, ``eval/heldout``),
  policy label, task, group, reward, stop reason, error class, token counts, timings, and the token / loss-mask /
  logprob lists themselves (TITO: the exact ids the trainer saw);
* ``turns`` — assistant turn of a trajectory: its token span, finish reason, weights version;
* ``tool_calls`` — tool call, from rollouts, oracle runs and probes: tool, ok, error class and text, returned
  empty, latency, and the calling task / world;
* ``oracle`` — oracle run of a task: passed, score, error;
* ``train_steps`` — loop step (``trainer.loops.StepRecord`` fields);
* ``evals`` — eval trial (task × pass) of a suite and policy;
* ``gates`` — criterion of a stage's gate report.

DuckDB allows one writer process per file, so the flow process is the only writer: each write opens the file, appends
in one transaction and closes it (readers such as ``recipe audit`` get the file between writes), under a lock shared
by the threads of this process. A stage that runs again first deletes its own rows (``clear_stage``).

    catalog = Catalog(run_folder / "catalog.duckdb")
    catalog.add_trajectories("derisk", "base-rollouts", "base", trajectories, tasks_by_id)
    catalog.query("SELECT tool, count(*) FROM tool_calls GROUP BY tool")
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from envs.types import TaskSpec, ToolCallRecord, Trajectory

SCHEMA: dict[str, str] = {
    "trajectories": """
        id BIGINT, stage VARCHAR, source VARCHAR, policy VARCHAR, step INTEGER,
        task_id VARCHAR, world_id VARCHAR, domain VARCHAR, tier VARCHAR, split VARCHAR,
        group_id VARCHAR, sample_index INTEGER, harness VARCHAR,
        reward DOUBLE, passed BOOLEAN, stop_reason VARCHAR, error_class VARCHAR, error VARCHAR,
        prompt_len INTEGER, n_tokens INTEGER, n_generated INTEGER, n_turns INTEGER, n_tool_calls INTEGER,
        weight_version_min INTEGER, weight_version_max INTEGER, llm_s DOUBLE, env_s DOUBLE,
        final_answer VARCHAR, criteria JSON, tokens INTEGER[], loss_mask TINYINT[], logprobs FLOAT[]""",
    "turns": """
        trajectory_id BIGINT, stage VARCHAR, turn INTEGER, start_pos INTEGER, end_pos INTEGER,
        finish_reason VARCHAR, weight_version INTEGER""",
    "tool_calls": """
        trajectory_id BIGINT, stage VARCHAR, source VARCHAR, task_id VARCHAR, world_id VARCHAR, turn INTEGER,
        tool VARCHAR, args JSON, ok BOOLEAN, error_class VARCHAR, error VARCHAR, returned_empty BOOLEAN,
        timed_out BOOLEAN, latency_s DOUBLE""",
    "oracle": """
        stage VARCHAR, task_id VARCHAR, world_id VARCHAR, domain VARCHAR, tier VARCHAR, split VARCHAR,
        passed BOOLEAN, score DOUBLE, seconds DOUBLE, error VARCHAR""",
    "train_steps": """
        stage VARCHAR, run VARCHAR, step INTEGER, wall_s DOUBLE, reward_mean DOUBLE, pass_rate DOUBLE,
        trajectories INTEGER, groups_dropped INTEGER, groups_stale INTEGER, trained BOOLEAN,
        generate_s DOUBLE, train_s DOUBLE, sync_s DOUBLE, wait_s DOUBLE, staleness_mean DOUBLE, staleness_max INTEGER,
        tokens_per_s DOUBLE, loss DOUBLE, logprob_abs_diff_mean DOUBLE, eval_reward DOUBLE, eval_pass_rate DOUBLE""",
    "evals": """
        stage VARCHAR, suite VARCHAR, policy VARCHAR, task_id VARCHAR, pass_index INTEGER, harness VARCHAR,
        domain VARCHAR, tier VARCHAR, reward DOUBLE, passed BOOLEAN, stop_reason VARCHAR, error_class VARCHAR""",
    "gates": """
        stage VARCHAR, criterion VARCHAR, measured DOUBLE, op VARCHAR, threshold DOUBLE, passed BOOLEAN,
        detail VARCHAR""",
}
STAGE_TABLES = tuple(SCHEMA)

_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(path.resolve(), threading.Lock())


def _columns(table: str) -> list[str]:
    return [part.strip().split()[0] for part in SCHEMA[table].split(",")]


class Catalog:
    """Appends to and queries one run's catalog file; see the module docstring."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = _lock_for(self.path)
        with self._connect() as con:
            for table, columns in SCHEMA.items():
                con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({columns})")

    @contextmanager
    def _connect(self, read_only: bool = False):
        with self._lock:
            con = duckdb.connect(str(self.path), read_only=read_only)
            try:
                yield con
            finally:
                con.close()

    # --- writing ------------------------------------------------------------------------------------------------

    def append(self, table: str, rows: Sequence[Mapping[str, Any]]) -> int:
        """Insert ``rows`` (dicts keyed by column; missing keys are NULL) into ``table`` in one transaction."""
        if not rows:
            return 0
        columns = _columns(table)
        unknown = set().union(*(row.keys() for row in rows)) - set(columns)
        if unknown:
            raise ValueError(f"{table} has no columns {sorted(unknown)}")
        frame = pd.DataFrame([{column: row.get(column) for column in columns} for row in rows], columns=columns)
        with self._connect() as con:
            con.register("incoming", frame)
            con.execute(f"INSERT INTO {table} SELECT {', '.join(columns)} FROM incoming")
        return len(rows)

    def clear_stage(self, stage: str) -> None:
        """Delete every row a stage wrote (it is about to run again)."""
        with self._connect() as con:
            for table in STAGE_TABLES:
                con.execute(f"DELETE FROM {table} WHERE stage = ?", [stage])

    def delete_rollouts(self, stage: str, source: str, step: int) -> None:
        """Delete the rollouts ``source`` recorded with loop step ``step``, their turns and tool calls (the step is
        about to be written again: a resumed job re-ran it)."""
        with self._connect() as con:
            ids = "SELECT id FROM trajectories WHERE stage = ? AND source = ? AND step = ?"
            for table in ("turns", "tool_calls"):
                con.execute(f"DELETE FROM {table} WHERE trajectory_id IN ({ids})", [stage, source, step])
            con.execute("DELETE FROM trajectories WHERE stage = ? AND source = ? AND step = ?", [stage, source, step])

    def replace_step(self, row: Mapping[str, Any]) -> None:
        """Write a ``train_steps`` row in place of the one with its stage, run and step (if any)."""
        where = [row["stage"], row["run"], row["step"]]
        with self._connect() as con:
            con.execute("DELETE FROM train_steps WHERE stage = ? AND run = ? AND step = ?", where)
        self.append("train_steps", [row])

    def add_trajectories(
        self,
        stage: str,
        source: str,
        policy: str,
        trajectories: Sequence[Trajectory],
        tasks_by_id: Mapping[str, TaskSpec],
        step: int | None = None,
    ) -> list[int]:
        """Append rollouts with their turns and tool calls; returns the new trajectory ids."""
        with self._connect() as con:
            first = con.execute("SELECT coalesce(max(id), 0) + 1 FROM trajectories").fetchone()[0]  # type: ignore[index]
        ids = list(range(first, first + len(trajectories)))
        rows, turns, calls = [], [], []
        for trajectory_id, t in zip(ids, trajectories, strict=True):
            task = tasks_by_id.get(t.task_id)
            rows.append(_trajectory_row(trajectory_id, stage, source, policy, step, t, task))
            turns += [
                {
                    "trajectory_id": trajectory_id,
                    "stage": stage,
                    "turn": span.turn,
                    "start_pos": span.start,
                    "end_pos": span.end,
                    "finish_reason": span.finish_reason,
                    "weight_version": span.weight_version,
                }
                for span in t.turns
            ]
            world = task.world_id if task else None
            calls += [tool_call_row(stage, source, t.task_id, world, c, trajectory_id) for c in t.tool_calls]
        self.append("trajectories", rows)
        self.append("turns", turns)
        self.append("tool_calls", calls)
        return ids

    # --- reading ------------------------------------------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[dict[str, Any]]:
        """Rows of a query as dicts; ``params`` fill ``?`` in order, or ``$name`` from a mapping."""
        with self._connect() as con:
            cursor = con.execute(sql, dict(params) if isinstance(params, Mapping) else list(params))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        with self._connect() as con:
            return con.execute(sql, list(params)).df()

    def count(self, table: str, stage: str | None = None) -> int:
        where, params = ("WHERE stage = ?", [stage]) if stage else ("", [])
        return int(self.query(f"SELECT count(*) AS n FROM {table} {where}", params)[0]["n"])


def _trajectory_row(
    trajectory_id: int, stage: str, source: str, policy: str, step: int | None, t: Trajectory, task: TaskSpec | None
) -> dict[str, Any]:
    return {
        "id": trajectory_id,
        "stage": stage,
        "source": source,
        "policy": policy,
        "step": step,
        "task_id": t.task_id,
        "world_id": task.world_id if task else None,
        "domain": str(task.domain) if task else None,
        "tier": str(task.tier) if task else None,
        "split": str(task.split) if task else None,
        "group_id": t.group_id,
        "sample_index": t.sample_index,
        "harness": t.harness,
        "reward": t.reward,
        "passed": t.passed,
        "stop_reason": str(t.stop_reason),
        "error_class": str(t.error_class) if t.error_class else None,
        "error": t.error,
        "prompt_len": t.prompt_len,
        "n_tokens": len(t.tokens),
        "n_generated": sum(t.loss_mask),
        "n_turns": len(t.turns),
        "n_tool_calls": len(t.tool_calls),
        "weight_version_min": min(t.weight_versions) if t.weight_versions else None,
        "weight_version_max": max(t.weight_versions) if t.weight_versions else None,
        "llm_s": t.llm_s,
        "env_s": t.env_s,
        "final_answer": t.final_answer,
        "criteria": json.dumps([c.model_dump(mode="json") for c in t.criteria]),
        "tokens": t.tokens,
        "loss_mask": t.loss_mask,
        "logprobs": t.logprobs,
    }


def tool_call_row(
    stage: str,
    source: str,
    task_id: str | None,
    world_id: str | None,
    call: ToolCallRecord,
    trajectory_id: int | None = None,
) -> dict[str, Any]:
    return {
        "trajectory_id": trajectory_id,
        "stage": stage,
        "source": source,
        "task_id": task_id,
        "world_id": world_id,
        "turn": call.turn,
        "tool": call.tool,
        "args": json.dumps(call.args, default=str),
        "ok": call.ok,
        "error_class": call.error_class,
        "error": call.error,
        "returned_empty": call.returned_empty,
        "timed_out": call.error_class == "timeout",
        "latency_s": call.latency_s,
    }
