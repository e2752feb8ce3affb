"""Which trajectories a static export holds when the run has more than it may (``recipe view RUN --static OUT``).

The first N ids of a run are its de-risk and overfit rollouts: the hero, ablation and transfer stages — the ones a
person opens the export for — came last and fell off. So the sample is drawn per stratum, one stratum per
(stage, source) — a training loop's rollouts, an eval suite, the base rollouts:

* every stratum gets an equal share of the limit, and what a small stratum does not need goes to the larger ones,
  so no stage or source is crowded out by an earlier, bigger one;
* inside a stratum the picks are spread over it (``spread_order``): early and late steps of a loop alike;
* base vs trained stays comparable: in a stratum where both policies ran, the unit picked is a task's pass — its
  base and trained trajectories together (``PAIRED``), so the compare view finds both sides in the folder.

    ids = choose_sample(rows, limit=5000)   # rows: dicts with id, stage, source, policy, task_id, sample_index
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PAIRED = frozenset({"base", "trained"})
"""The policies of a before/after comparison: trajectories of one task under both are kept together."""
SAMPLE_COLUMNS = ("id", "stage", "source", "policy", "task_id", "sample_index")
"""What ``choose_sample`` reads of each trajectory."""


def spread_order(n: int) -> list[int]:
    """``0 .. n-1`` in bit-reversed order (van der Corput), so that any prefix is spread evenly over the range:
    ``spread_order(5) == [0, 4, 2, 1, 3]`` (bits 000, 100, 010, 001, 011 read backwards: 0, 1, 2, 4, 6)."""
    bits = max(1, (n - 1).bit_length())
    return sorted(range(n), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))


def _units(members: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """The stratum's ids in the groups that are kept whole, in id order: a task's pass under every policy where
    base and trained both ran, else one trajectory each."""
    if not PAIRED.issubset(m["policy"] for m in members):
        return [[m["id"]] for m in members]
    units: dict[tuple[Any, Any], list[int]] = {}
    for m in members:
        units.setdefault((m["task_id"], m["sample_index"]), []).append(m["id"])
    return list(units.values())


def _fill(units: list[list[int]], quota: int) -> list[int]:
    """Whole units, taken in spread order while they fit in ``quota``."""
    chosen: list[int] = []
    for index in spread_order(len(units)):
        if len(chosen) + len(units[index]) <= quota:
            chosen += units[index]
        if len(chosen) == quota:
            break
    return chosen


def choose_sample(rows: Sequence[Mapping[str, Any]], limit: int) -> list[int]:
    """The ids of at most ``limit`` of ``rows`` (see the module docstring), ascending; all of them when they fit.

    Water-filling, smallest stratum first: each takes an equal share of what is left (at least one unit while any
    fits), so what a small stratum does not use goes to the larger ones after it."""
    if len(rows) <= limit:
        return sorted(row["id"] for row in rows)
    strata: dict[tuple[Any, Any], list[Mapping[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["id"]):
        strata.setdefault((row["stage"], row["source"]), []).append(row)
    chosen: list[int] = []
    ordered = sorted(strata.values(), key=len)
    for index, members in enumerate(ordered):
        units = _units(members)
        left = limit - len(chosen)
        chosen += _fill(units, max(left // (len(ordered) - index), min(len(units[0]), left)))
    return sorted(chosen)
