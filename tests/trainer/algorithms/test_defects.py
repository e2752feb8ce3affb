"""The gate matrix's reward-path defects, by hand: what they do to rewards and advantages, and that a batch applies
them exactly where the docstring says (and never without being asked)."""

import torch

from tests.trainer.local.test_batch import trajectory
from trainer.algorithms import AlgorithmConfig, RewardDefect, shifted_within_groups
from trainer.local.batch import TrainBatch


def test_shuffled_rewards_are_each_groups_rewards_shifted_by_one() -> None:
    # group a = positions 0, 2, 3 with rewards 1, 0.5, 0.25 → each takes the next member's: 0.5, 0.25, 1 (wrapping);
    # group b has one member and keeps its reward.
    got = shifted_within_groups(torch.tensor([1.0, 0.0, 0.5, 0.25]), ["a", "b", "a", "a"])
    assert got.tolist() == [0.5, 0.0, 0.25, 1.0]
    # a derangement: in a group of distinct rewards no trajectory keeps its own
    rewards = torch.tensor([0.0, 0.25, 0.5, 0.75])
    assert (shifted_within_groups(rewards, ["g"] * 4) != rewards).all()


def _advantages(defect: RewardDefect) -> list[float]:
    # one group of three: rewards 1, 0, 0.5 (mean 0.5) → Dr. GRPO advantages 0.5, −0.5, 0
    batch = [trajectory("g", 6, 1.0), trajectory("g", 7, 0.0), trajectory("g", 8, 0.5)]
    train = TrainBatch.from_trajectories(batch, AlgorithmConfig(defect=defect))
    return train.advantages_BT[:, 4].tolist()  # the first sampled token of each row carries its advantage


def test_a_batch_applies_the_defect_it_is_given_and_none_otherwise() -> None:
    assert _advantages(RewardDefect.NONE) == [0.5, -0.5, 0.0]
    assert _advantages(RewardDefect.INVERTED_ADVANTAGES) == [-0.5, 0.5, 0.0]
    # shuffled: the rows are graded 0, 0.5, 1 (the next member's reward) → advantages −0.5, 0, 0.5
    assert _advantages(RewardDefect.SHUFFLED_REWARDS) == [-0.5, 0.0, 0.5]
