"""A stage's ``Publication`` from the run's record: the catalog's rows, the gate report and the loops' histories.

Keys are ``<stage>/<kind>/...`` with every part a slug (``metric_key``: trackers refuse most punctuation):

* ``<stage>/train/<loop>/<field>`` per step — the ``train_steps`` row (reward, pass rate, loss, ``sync_s`` = the
  weight-sync latency, staleness, tokens/s, …) and the step's mechanism activity from the loop's ``history.json``
  (DPPO masked share, |π/μ − 1|, …);
* ``<stage>/eval/<suite>/<policy>/pass_at_1`` (and ``_se``, ``passes``, ``trials``) — Pass@1 as the evals report
  it: the per-pass share of solved tasks, mean ± std/√passes over passes (``evals.types.Summary``);
* ``<stage>/gate/<criterion>`` (measured), ``…/threshold``, ``…/passed`` (1/0) and ``<stage>/gate/passed``;
* ``<stage>/metrics/<name>`` — every number in the report's metrics (nested ones joined with ``/``: the hero's paired
  CI is ``…/delta_ci/0`` and ``/1``).

The table ``<stage>/trajectories`` holds ``trajectories_per_stage`` rollouts of the stage, the conversation decoded
with the base's tokenizer. Where the stage evaluated two policies on the same tasks (hero, transfer), it holds pairs:
each chosen task once per policy, the same pass, so base and trained sit side by side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tasks.catalog import Catalog
from tasks.explorer.queries import Explorer
from tasks.run_store import train_folder_label
from tasks.tracking.contract import Point, Publication, Table
from trainer.loops import LoopHistory
from trainer.loops.history import HISTORY_FILE

TRAIN_FIELDS = (
    "reward_mean", "pass_rate", "trajectories", "groups_dropped", "groups_stale", "generate_s", "train_s", "sync_s",
    "wait_s", "staleness_mean", "staleness_max", "tokens_per_s", "loss", "logprob_abs_diff_mean", "eval_reward",
    "eval_pass_rate",
)  # fmt: skip
TABLE_COLUMNS = (
    "source", "policy", "task_id", "tier", "reward", "passed", "turns", "tool_calls", "weight_version", "error_class",
    "conversation",
)  # fmt: skip
MAX_CONVERSATION_CHARS = 20_000


def metric_key(*parts: str) -> str:
    """``parts`` joined with ``/``, each a slug: lower case, runs of anything but letters, digits, ``.`` and ``-``
    made one ``_`` (MLflow and W&B refuse most punctuation; TensorBoard groups by the first part)."""
    return "/".join(re.sub(r"[^a-z0-9.\-]+", "_", part.lower()).strip("_") or "_" for part in parts)


def train_points(catalog: Catalog, stage: str, stage_dir: Path) -> list[Point]:
    rows = catalog.query("SELECT * FROM train_steps WHERE stage = ? ORDER BY run, step", [stage])
    points = [
        Point(metric_key(stage, "train", row["run"], name), float(row[name]), row["step"])
        for row in rows
        for name in TRAIN_FIELDS
        if _finite(row.get(name))
    ]
    for label, history in _histories(stage_dir, {row["run"] for row in rows}):
        for record in history.steps:
            if record.activity is None:
                continue
            for name, value in record.activity.model_dump().items():
                points.append(Point(metric_key(stage, "train", label, name), float(value), record.step))
    return points


def _histories(stage_dir: Path, labels: set[str]) -> Iterator[tuple[str, LoopHistory]]:
    """Each loop's history in the stage's folder (``train-<label>-<key>/``), by the label its catalog rows carry."""
    for folder in sorted(stage_dir.glob("train-*")):
        label = train_folder_label(folder.name)
        if label in labels:
            try:
                yield label, LoopHistory.model_validate_json((folder / HISTORY_FILE).read_bytes())
            except (OSError, ValueError):
                continue  # a history that is not there (a job's folder elsewhere) or damaged: the steps still go


def eval_points(catalog: Catalog, stage: str) -> list[Point]:
    """Pass@1 per suite and policy: each pass's share of solved tasks, mean and standard error over passes."""
    shares = catalog.query(
        "SELECT suite, policy, pass_index, avg(passed::DOUBLE) AS share, count(*) AS n FROM evals WHERE stage = ? "
        "GROUP BY ALL ORDER BY suite, policy, pass_index",
        [stage],
    )
    by_policy: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in shares:
        by_policy.setdefault((row["suite"], row["policy"]), []).append(row)
    points = []
    for (suite, policy), passes in by_policy.items():
        values = [p["share"] for p in passes]
        mean = sum(values) / len(values)
        summary = {"pass_at_1": mean, "passes": len(values), "trials": sum(p["n"] for p in passes)}
        if len(values) > 1:
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            summary["pass_at_1_se"] = std / math.sqrt(len(values))
        points += [Point(metric_key(stage, "eval", suite, policy, name), float(v)) for name, v in summary.items()]
    return points


def gate_points(stage: str, report: Mapping[str, Any]) -> list[Point]:
    points = [Point(metric_key(stage, "gate", "passed"), float(bool(report["passed"])))]
    for criterion in report["criteria"]:
        key = metric_key(stage, "gate", criterion["name"])
        if _finite(criterion["measured"]):
            points.append(Point(key, float(criterion["measured"])))
        points += [
            Point(f"{key}/threshold", float(criterion["threshold"])),
            Point(f"{key}/passed", float(criterion["passed"])),
        ]
    for name, value in _numbers(report.get("metrics", {})):
        points.append(Point(metric_key(stage, "metrics", *name), value))
    return points


def _numbers(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    """Every finite number in nested dicts and lists, with its path (bools count as 0/1; strings are skipped)."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _numbers(inner, (*path, str(key)))
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            yield from _numbers(inner, (*path, str(index)))
    elif _finite(value):
        yield path, float(value)


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not (isinstance(value, float) and not math.isfinite(value))


def trajectory_table(explorer: Explorer, stage: str, limit: int) -> Table | None:
    """``limit`` of the stage's rollouts: base-vs-trained pairs where two policies were evaluated on the same tasks,
    else a spread over its sources and tasks (the same rows every time: ordered by a hash of the id)."""
    if limit <= 0:
        return None
    pairs = explorer.catalog.rows(
        """WITH evaluated AS (
               SELECT task_id FROM trajectories WHERE stage = ? AND source LIKE 'eval/%'
               GROUP BY task_id HAVING count(DISTINCT policy) >= 2 ORDER BY hash(task_id) LIMIT ?)
           SELECT min(id) AS id FROM trajectories
           WHERE stage = ? AND source LIKE 'eval/%' AND task_id IN (SELECT task_id FROM evaluated)
           GROUP BY task_id, policy, source""",
        [stage, max(1, limit // 2), stage],
    )
    ids = [row["id"] for row in pairs][:limit]
    if not ids:
        spread = explorer.catalog.rows(
            "SELECT id FROM trajectories WHERE stage = ? ORDER BY hash(id) LIMIT ?", [stage, limit]
        )
        ids = [row["id"] for row in spread]
    if not ids:
        return None
    views = explorer.trajectory_views(ids)
    rows = [_table_row(views[i]) for i in sorted(views, key=lambda i: (views[i]["task_id"], views[i]["policy"]))]
    return Table(metric_key(stage, "trajectories"), TABLE_COLUMNS, rows)


def _table_row(view: dict[str, Any]) -> tuple[Any, ...]:
    return (
        view["source"], view["policy"], view["task_id"], view["tier"], view["reward"], view["passed"], view["n_turns"],
        view["n_tool_calls"], view["weight_version_max"], view["error_class"], conversation_text(view),
    )  # fmt: skip


def conversation_text(view: dict[str, Any]) -> str:
    """The rollout as one text: the prompt, then each turn's pieces (decoded, or token ids without a tokenizer)."""
    pieces = [*view["prompt"], *(piece for turn in view["turns"] for piece in turn["pieces"])]
    text = "".join(str(piece.get("text", "")) for piece in pieces)
    return text if len(text) <= MAX_CONVERSATION_CHARS else text[:MAX_CONVERSATION_CHARS] + " …"


def stage_publication(
    explorer: Explorer, stage: str, stage_dir: Path, report: Mapping[str, Any], limit: int
) -> Publication:
    catalog = Catalog(explorer.store.catalog_path)
    points = train_points(catalog, stage, stage_dir) + eval_points(catalog, stage) + gate_points(stage, report)
    table = trajectory_table(explorer, stage, limit)
    verdict = "passed" if report["passed"] else "failed its gate"
    return Publication(stage, points, [table] if table else [], f"{stage} {verdict}: {_criteria_line(report)}")


def _criteria_line(report: Mapping[str, Any]) -> str:
    return "; ".join(
        f"{c['name']} {c['measured'] if c['measured'] is not None else 'n/a'} {c['op']} {c['threshold']}"
        f" {'ok' if c['passed'] else 'FAIL'}"
        for c in report["criteria"]
    )
