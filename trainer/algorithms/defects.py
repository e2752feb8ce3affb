"""Deliberate bugs in the reward → advantage path, for the gate matrix (``flows.config.Defect``).

Each reproduces what a real bookkeeping bug in a trainer does, at the place it would sit, so the learning gates can
be shown to fail on it: the overfit gate on advantages of the wrong sign, the hero gate on training on noise. A real
run uses ``RewardDefect.NONE``; the SkyRL rendering refuses any other.

* ``inverted_advantages``: A_i ← −A_i (a sign convention flipped between the advantage and the loss): every step
  descends the reward it should ascend.
* ``shuffled_rewards``: the rewards shuffled across each prompt group, by the shuffle an off-by-one pairing rewards
  with trajectories makes: of the group's G samples in batch order, sample k is graded with sample (k + 1) mod G's
  reward, R'_k = R_{(k+1) mod G} — a derangement, so no trajectory keeps its own. The samples are independent, so
  each trajectory's reward, and so its advantage, is noise with respect to what it did (training on noise); the
  group's rewards, mean and spread are unchanged, so no filter notices.
"""

from __future__ import annotations

import torch

from trainer.algorithms.config import RewardDefect
from trainer.algorithms.groups import GroupIds, group_index

__all__ = ["RewardDefect", "shifted_within_groups"]


def shifted_within_groups(rewards_B: torch.Tensor, group_ids_B: GroupIds) -> torch.Tensor:
    """R'_k = R_{(k+1) mod G} within each group, members taken in batch order; a group of one keeps its reward.

    >>> shifted_within_groups(torch.tensor([1.0, 0.0, 0.5, 0.25]), ["a", "b", "a", "a"]).tolist()
    [0.5, 0.0, 0.25, 1.0]
    """
    groups = group_index(group_ids_B, rewards_B.shape[0], rewards_B.device)
    shifted_B = rewards_B.clone()
    for group in range(groups.num_groups):
        members = torch.nonzero(groups.index_B == group).flatten()
        shifted_B[members] = rewards_B[members.roll(-1)]
    return shifted_B
