"""A stage's fault report (``faults.json`` in its folder): what a chaos run injected, what recovered, what was lost.

The injected faults and the retries come from the stage's ``faults.jsonl`` (``envs.faults``: every injector and every
recovery appends to it, gateway processes included); the trajectories from the catalog, so "count in = count out"
is checked against what the stage recorded: every rollout is either graded or carries its error class, and every
group holds as many rollouts as its largest sibling group (none went missing half-way).

    report = write_fault_report(catalog, "derisk", run_folder / "1-derisk")
    report["injected"], report["retried"], report["trajectories"]["lost"]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.faults import INJECTED, RETRIED, read_fault_log
from envs.files import atomic_write_json
from tasks.catalog import Catalog

FAULT_LOG = "faults.jsonl"
FAULT_REPORT = "faults.json"

_BY_CLASS_SQL = """
SELECT coalesce(error_class, 'graded') AS outcome, count(*) AS n FROM trajectories WHERE stage = ? GROUP BY 1
"""
_GROUPS_SQL = """
SELECT source, group_id, count(*) AS n FROM trajectories WHERE stage = ? GROUP BY source, group_id
"""
_TOOL_SQL = """
SELECT count(*) FILTER (WHERE timed_out) AS timed_out, count(*) FILTER (WHERE returned_empty) AS returned_empty,
       count(*) FILTER (WHERE error_class = 'transport') AS transport_failures
FROM tool_calls WHERE stage = ? AND trajectory_id IS NOT NULL
"""


def fault_report(catalog: Catalog, stage: str, folder: Path) -> dict[str, Any]:
    """The stage's figures (see the module docstring); ``lost`` counts rollouts missing from short groups."""
    counts = read_fault_log(folder / FAULT_LOG)
    by_class = {row["outcome"]: row["n"] for row in catalog.query(_BY_CLASS_SQL, [stage])}
    groups = catalog.query(_GROUPS_SQL, [stage])
    widest: dict[str, int] = {}
    for row in groups:
        widest[row["source"]] = max(widest.get(row["source"], 0), row["n"])
    lost = sum(widest[row["source"]] - row["n"] for row in groups)
    [tools] = catalog.query(_TOOL_SQL, [stage])
    injected = counts[INJECTED]
    return {
        "stage": stage,
        INJECTED: injected,
        "injected_total": sum(injected.values()),
        RETRIED: counts[RETRIED],
        "trajectories": {"total": sum(by_class.values()), "by_outcome": by_class, "groups": len(groups), "lost": lost},
        "tool_calls": tools,
    }


def write_fault_report(catalog: Catalog, stage: str, folder: Path) -> dict[str, Any]:
    report = fault_report(catalog, stage, folder)
    atomic_write_json(folder / FAULT_REPORT, report)
    return report
