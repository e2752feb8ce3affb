"""Task generators: one module per domain turns a world's ``WorldFacts`` into toy, standard and deliverable tasks.

``generate_tasks(facts_by_world)`` returns every task of every world, ids ``<world_id>-<tier>-<nnnn>``, split
``heldout`` for world 3 of each domain and for ~15 % of the other worlds' tasks (a salted hash of the task id).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from envs.taskgen import ib, law, mc
from envs.taskgen.common import TaskDraft, finalise, split_of
from envs.types import Domain, TaskSpec
from envs.worlds import WorldFacts

GENERATORS: dict[Domain, Callable[[WorldFacts], list[TaskDraft]]] = {
    Domain.INVESTMENT_BANKING: ib.tasks,
    Domain.MANAGEMENT_CONSULTING: mc.tasks,
    Domain.CORPORATE_LAW: law.tasks,
}


def generate_tasks(facts_by_world: Mapping[str, WorldFacts]) -> list[TaskSpec]:
    """Every task of every world, worlds in sorted id order."""
    tasks: list[TaskSpec] = []
    for world_id in sorted(facts_by_world):
        facts = facts_by_world[world_id]
        if facts.domain not in GENERATORS:
            raise ValueError(f"no task generator for domain {facts.domain!r} (world {world_id})")
        tasks += finalise(facts, GENERATORS[facts.domain](facts))
    return tasks


__all__ = ["GENERATORS", "TaskDraft", "generate_tasks", "split_of"]
