"""Prompt-group bookkeeping shared by advantages, aggregation and filters.

A mini-batch holds B trajectories; ``group_ids_B[i]`` names the prompt group (the G samples of one prompt) that
trajectory i belongs to. Ids may be any hashable values (strings from ``Trajectory.group_id``) or an integer
tensor. ``GroupIndex`` maps them to dense indices 0..P-1 in order of first appearance, so per-group statistics are
``index_add_`` / ``bincount`` calls instead of Python loops over groups.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

GroupIds = Sequence[Hashable] | torch.Tensor


@dataclass(frozen=True)
class GroupIndex:
    """Dense group index of a mini-batch: ``index_B[i]`` in 0..P-1, ``ids_P[p]`` the original id of group p."""

    index_B: torch.Tensor
    ids_P: list[Hashable]

    @property
    def num_groups(self) -> int:
        return len(self.ids_P)

    @property
    def sizes_P(self) -> torch.Tensor:
        """Number of trajectories in each group."""
        return torch.bincount(self.index_B, minlength=self.num_groups)

    def sum_P(self, values_B: torch.Tensor) -> torch.Tensor:
        """Per-group sum of a per-trajectory quantity."""
        return torch.zeros(self.num_groups, dtype=values_B.dtype, device=values_B.device).index_add_(
            0, self.index_B, values_B
        )


def group_index(group_ids_B: GroupIds, batch_size: int, device: torch.device | str = "cpu") -> GroupIndex:
    """Dense index of ``group_ids_B`` (first-appearance order); checks that there is one id per trajectory."""
    ids = group_ids_B.tolist() if isinstance(group_ids_B, torch.Tensor) else list(group_ids_B)
    if len(ids) != batch_size:
        raise ValueError(f"group_ids_B has {len(ids)} entries but the batch has {batch_size} trajectories")
    dense: dict[Hashable, int] = {}
    index = [dense.setdefault(group_id, len(dense)) for group_id in ids]
    return GroupIndex(index_B=torch.tensor(index, dtype=torch.long, device=device), ids_P=list(dense))
