"""``TrainBatch``: one mini-batch of trajectories turned into the tensors the loss needs, and its micro-batches.

From a list of ``envs.types.Trajectory`` (tokens, loss_mask, rollout log-probs μ, group_id, reward, stop_reason),
in this order (shared/RECIPE.md, "Filters and shaping"):

1. adaptive length penalty: R_i ← R_i − penalty_i (``filters.adaptive_length_penalty``; zero when its coefficients
   are 0, the recipe's setting). It comes first because it is part of the reward: a group whose raw rewards tie
   but whose lengths differ does carry signal under ALP.
2. zero-variance filter: groups whose reward spread is ≤ ``zero_variance_tol`` are dropped (``EmptyBatchError``
   when nothing is left; the async loop refills instead).
3. overlong filter (when on): loss mask zeroed on every trajectory whose stop reason is not "stop".
4. advantages over the kept groups (``compute_advantages``), broadcast to loss-masked tokens.
5. token weights of the configured aggregation over the WHOLE mini-batch (``token_weights``), so any split into
   micro-batches sums to the same loss and gradient.

A deliberate defect of the config (``AlgorithmConfig.defect``, the gate matrix only) shuffles the rewards within
groups before step 1 or flips the advantages' sign after step 4 (``trainer.algorithms.defects``).

Tensors are right-padded to the longest trajectory (T); ``lengths_B`` holds the true lengths. ``stats`` records what
the steps did, among it the activity of the switchable mechanisms (``trainer.algorithms.activity``): the mean length
penalty, the share of kept trajectories the overlong filter masked, how far the token weights are from token_mean's,
and the context nudges the input trajectories carry.

``micro_batches(token_budget, layout)`` bins the rows by first-fit decreasing: rows sorted by length (longest
first, ties by index) each go into the first micro-batch whose cost stays within the budget, else open a new one.
The cost is the tokens the forward computes: Σ len for the packed layout, rows × longest for the padded one. A
row longer than the budget gets a micro-batch of its own. The shared-prefix layout bins whole prefix groups (a GRPO
group's rows share their prompt) by what they compute once shared (``shared_prefix_bins``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from envs.types import Trajectory
from trainer.algorithms import (
    AlgorithmConfig,
    RewardDefect,
    adaptive_length_penalty,
    broadcast_to_tokens,
    compute_advantages,
    length_penalty_mean,
    overlong_dropped_share,
    overlong_filter,
    shifted_within_groups,
    token_weights,
    weights_vs_token_mean,
    zero_variance_filter,
)
from trainer.algorithms.registry import Registry
from trainer.local.logprobs import Layout
from trainer.local.prefix_sharing import PrefixGroup, prefix_groups, shared_cost


class EmptyBatchError(ValueError):
    """No trajectory is left to train on after filtering (every group had zero reward variance)."""


@dataclass(frozen=True)
class BatchStats:
    """What shaping and filtering did; ``reward_mean`` is over every input trajectory, raw (the policy's score this
    step)."""

    trajectories_in: int
    groups_in: int
    groups_dropped: int
    overlong_masked: int
    """Kept trajectories whose loss mask the overlong filter zeroed."""
    reward_mean: float
    trajectories_kept: int = 0
    """Trajectories left after the zero-variance filter (the batch's B)."""
    length_penalty_mean: float = 0.0
    """Mean adaptive length penalty subtracted per input trajectory (``activity.length_penalty_mean``)."""
    weights_vs_token_mean: float = 0.0
    """TV distance of the aggregation's token weights from token_mean's (``activity.weights_vs_token_mean``)."""
    nudges_inserted: int = 0
    """Context notices in the input trajectories (Σ ``Trajectory.nudges``)."""

    @property
    def overlong_dropped_share(self) -> float:
        """The share of kept trajectories the overlong filter masked (``activity.overlong_dropped_share``)."""
        return overlong_dropped_share(self.overlong_masked, self.trajectories_kept)


@dataclass(frozen=True)
class MicroBatch:
    """Rows ``rows_S`` of the mini-batch; ``length`` is the longest of them (the padded width L)."""

    rows_S: Tensor
    length: int

    def take(self, values_BT: Tensor) -> Tensor:
        """This micro-batch's (S, L) slice of a (B, T) mini-batch tensor."""
        return values_BT[self.rows_S, : self.length]


@dataclass(frozen=True)
class TrainBatch:
    """A filtered mini-batch of B trajectories, right-padded to T tokens."""

    tokens_BT: Tensor
    lengths_B: Tensor
    loss_mask_BT: Tensor
    rollout_logprobs_BT: Tensor
    advantages_BT: Tensor
    weights_BT: Tensor
    rewards_B: Tensor
    group_ids_B: list[str]
    stats: BatchStats

    @classmethod
    def from_trajectories(cls, trajectories: Sequence[Trajectory], config: AlgorithmConfig) -> TrainBatch:
        """Apply shaping, filters, advantages and token weights of ``config`` (see the module docstring)."""
        if not trajectories:
            raise ValueError("a train batch needs at least one trajectory, got none")
        for trajectory in trajectories:
            _check_trajectory(trajectory)
        raw_rewards_B = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)
        group_ids_B = [t.group_id for t in trajectories]
        if config.defect is RewardDefect.SHUFFLED_REWARDS:
            raw_rewards_B = shifted_within_groups(raw_rewards_B, group_ids_B)
        assistant_B = torch.tensor([sum(t.loss_mask) for t in trajectories])
        env_B = torch.tensor([len(t.tokens) - t.prompt_len for t in trajectories]) - assistant_B
        penalty_B = adaptive_length_penalty(
            raw_rewards_B,
            group_ids_B,
            assistant_B,
            env_B.clamp(min=0),
            assistant_coef=config.alp_assistant_coef,
            env_coef=config.alp_env_coef,
            solve_threshold=config.alp_solve_threshold,
        )
        rewards_B = raw_rewards_B - penalty_B
        kept_groups = set(zero_variance_filter(rewards_B, group_ids_B, config.zero_variance_tol))
        rows = [i for i, group_id in enumerate(group_ids_B) if group_id in kept_groups]
        groups_in = len(set(group_ids_B))
        if not rows:
            raise EmptyBatchError(
                f"all {groups_in} groups of the batch have reward spread ≤ zero_variance_tol "
                f"{config.zero_variance_tol}: nothing to train on"
            )
        kept = [trajectories[i] for i in rows]
        kept_rewards_B = rewards_B[rows]
        kept_group_ids_B = [group_ids_B[i] for i in rows]

        lengths_B = torch.tensor([len(t.tokens) for t in kept])
        width = int(lengths_B.max())
        tokens_BT = _padded([t.tokens for t in kept], width, torch.long)
        loss_mask_BT = _padded([t.loss_mask for t in kept], width, torch.float32)
        rollout_logprobs_BT = _padded([t.logprobs for t in kept], width, torch.float32)
        stop_reasons_B = [str(t.stop_reason) for t in kept]
        if config.overlong_filter:
            loss_mask_BT = overlong_filter(loss_mask_BT, stop_reasons_B)

        advantages_B = compute_advantages(kept_rewards_B, kept_group_ids_B, config)
        if config.defect is RewardDefect.INVERTED_ADVANTAGES:
            advantages_B = -advantages_B
        weights_BT = token_weights(loss_mask_BT, kept_group_ids_B, config.aggregation, config.token_sum_norm_len)
        return cls(
            tokens_BT=tokens_BT,
            lengths_B=lengths_B,
            loss_mask_BT=loss_mask_BT,
            rollout_logprobs_BT=rollout_logprobs_BT * loss_mask_BT,
            advantages_BT=broadcast_to_tokens(advantages_B, loss_mask_BT),
            weights_BT=weights_BT,
            rewards_B=kept_rewards_B,
            group_ids_B=kept_group_ids_B,
            stats=BatchStats(
                trajectories_in=len(trajectories),
                groups_in=groups_in,
                groups_dropped=groups_in - len(kept_groups),
                overlong_masked=sum(reason != "stop" for reason in stop_reasons_B) if config.overlong_filter else 0,
                reward_mean=float(raw_rewards_B.mean()),
                trajectories_kept=len(kept),
                length_penalty_mean=length_penalty_mean(penalty_B),
                weights_vs_token_mean=weights_vs_token_mean(weights_BT, loss_mask_BT),
                nudges_inserted=sum(t.nudges for t in trajectories),
            ),
        )

    @property
    def num_tokens(self) -> int:
        return int(self.lengths_B.sum())

    def micro_batches(self, token_budget: int, layout: Layout | str = Layout.PACKED) -> list[MicroBatch]:
        """Bins of at most ``token_budget`` computed tokens each (see the module docstring)."""
        if Layout(layout) is Layout.SHARED_PREFIX:  # its cost depends on the tokens, not only on the lengths
            rows = [row[:length] for row, length in zip(self.tokens_BT.tolist(), self.lengths_B.tolist(), strict=True)]
            bins = shared_prefix_bins(rows, token_budget)
        else:
            bins = first_fit_decreasing(self.lengths_B.tolist(), token_budget, BIN_COSTS.get(layout))
        return [MicroBatch(rows_S=torch.tensor(rows), length=int(self.lengths_B[rows].max())) for rows in bins]


BinCost = Callable[[list[int]], int]
BIN_COSTS: Registry[BinCost] = Registry("micro-batch cost")


@BIN_COSTS.register(Layout.PACKED)
def packed_cost(lengths: list[int]) -> int:
    """One row of all sequences back to back: Σ len."""
    return sum(lengths)


@BIN_COSTS.register(Layout.PADDED)
def padded_cost(lengths: list[int]) -> int:
    """Every row padded to the longest: rows × max len."""
    return len(lengths) * max(lengths)


def first_fit_decreasing(lengths: Sequence[int], budget: int, cost: BinCost = packed_cost) -> list[list[int]]:
    """Indices of ``lengths`` in bins: longest first (ties by index), each into the first bin whose ``cost`` stays
    ≤ ``budget``, else into a new bin (so an item over the budget sits alone). Bins list their items in the order
    they were placed, i.e. by decreasing length."""
    if budget < 1:
        raise ValueError(f"token budget must be ≥ 1, got {budget}")
    bins: list[list[int]] = []
    bin_lengths: list[list[int]] = []
    for index in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        length = lengths[index]
        target = next((b for b, held in enumerate(bin_lengths) if cost([*held, length]) <= budget), len(bins))
        if target == len(bins):
            bins.append([])
            bin_lengths.append([])
        bins[target].append(index)
        bin_lengths[target].append(length)
    return bins


def shared_prefix_bins(sequences: Sequence[Sequence[int]], budget: int) -> list[list[int]]:
    """Indices of ``sequences`` in bins of at most ``budget`` computed tokens each, keeping prefix groups together.

    Groups (``prefix_sharing.prefix_groups`` over all sequences) are the items: a group over the budget is cut into
    runs of members that fit (each run pays the prefix again; a member over the budget sits alone), then the items go
    into bins by first-fit decreasing on their shared cost (``first_fit_decreasing``).
    """
    lengths = [len(sequence) for sequence in sequences]
    items: list[PrefixGroup] = []
    for group in prefix_groups(sequences):
        run: tuple[int, ...] = ()
        for member in group.members:
            if run and shared_cost(PrefixGroup((*run, member), group.shared), lengths) > budget:
                items.append(PrefixGroup(run, group.shared))
                run = ()
            run += (member,)
        items.append(PrefixGroup(run, group.shared))
    bins = first_fit_decreasing([shared_cost(item, lengths) for item in items], budget)
    return [[member for index in bin_ for member in items[index].members] for bin_ in bins]


def _padded(rows: Sequence[Sequence[float]], width: int, dtype: torch.dtype) -> Tensor:
    out = torch.zeros((len(rows), width), dtype=dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=dtype)
    return out


def _check_trajectory(trajectory: Trajectory) -> None:
    """Token, mask and log-prob lists must align; the first token has no prefix, so it cannot be a loss token."""
    name = f"trajectory {trajectory.task_id!r} (group {trajectory.group_id!r}, sample {trajectory.sample_index})"
    n = len(trajectory.tokens)
    if n == 0:
        raise ValueError(f"{name} has no tokens")
    if len(trajectory.loss_mask) != n or len(trajectory.logprobs) != n:
        raise ValueError(
            f"{name}: tokens ({n}), loss_mask ({len(trajectory.loss_mask)}) and logprobs "
            f"({len(trajectory.logprobs)}) must have the same length"
        )
    if any(m not in (0, 1) for m in trajectory.loss_mask):
        raise ValueError(f"{name}: loss_mask values must be 0 or 1")
    if trajectory.loss_mask[0]:
        raise ValueError(
            f"{name}: loss_mask[0] is 1, but the first token has no prefix the policy could predict it from"
        )
