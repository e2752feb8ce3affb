"""The seeded task stream both loops walk: which tasks (``TaskFilter``), in which order (``task_at``), and with which
sampling seeds (``group_seed``).

Task order (``task_at``): epoch e = i // N is a permutation of the N tasks drawn by ``random.Random(f"{seed}:{e}")``;
position i of the stream is task ``perm_e[i mod N]``. The cursor is just the integer i, so a checkpoint that stores it
resumes the exact same stream.

Sampling seeds (``group_seed``): the harness derives one seed per (sample, turn) from a base seed; each group gets its
own base ``seed·P² + position·P + 1`` (P = 1 000 003) so that two visits of a task in different epochs draw differently.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from envs.apex import refuse_evaluation_only
from envs.types import Split, TaskSpec, Tier

_PRIME = 1_000_003


class TaskFilter(BaseModel):
    """Which tasks a loop trains on: every given condition must hold (None: no condition)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Tier | None = Tier.TOY
    split: Split | None = Split.TRAIN
    ids: tuple[str, ...] | None = None
    limit: int | None = Field(None, ge=1, description="keep the first N matching tasks (in the given order)")

    def select(self, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
        """The tasks to train on. Every training loop selects its tasks here, so this is where a task set holding
        evaluation-only tasks (APEX-Agents: its licence forbids training) is refused, whatever the filter."""
        refuse_evaluation_only(tasks)
        chosen = [
            t
            for t in tasks
            if (self.tier is None or t.tier == self.tier)
            and (self.split is None or t.split == self.split)
            and (self.ids is None or t.task_id in self.ids)
        ]
        if self.ids is not None:
            missing = sorted(set(self.ids) - {t.task_id for t in chosen})
            if missing:
                raise ValueError(f"task filter ids not found among the tier/split-matching tasks: {missing[:10]}")
        chosen = chosen[: self.limit]
        if not chosen:
            raise ValueError(f"no task matches the filter tier={self.tier} split={self.split} ids={self.ids}")
        return chosen


def task_at(position: int, n_tasks: int, seed: int) -> int:
    """Index of the task at stream ``position`` (see the module docstring): a fresh seeded permutation per epoch."""
    if n_tasks < 1 or position < 0:
        raise ValueError(f"need n_tasks ≥ 1 and position ≥ 0, got {n_tasks} and {position}")
    epoch, offset = divmod(position, n_tasks)
    order = list(range(n_tasks))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order[offset]


def group_seed(seed: int, position: int) -> int:
    """Base sampling seed of the group at stream ``position``: seed·P² + position·P + 1 mod 2⁶³."""
    return (seed * _PRIME * _PRIME + position * _PRIME + 1) % (1 << 63)
