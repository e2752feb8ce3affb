"""Prefix-shared packing: sequences that start with the same tokens have those tokens computed once.

The rollouts of a GRPO group share their prompt (about three quarters of their tokens in the local profile) and the
bootstrap's examples of one harness share its system prompt and tool listing. A packed row (``packed_attention``)
computes every sequence's copy. Here the row holds, for each group of sequences with a common prefix of p tokens, the
prefix once and then each member's remaining tokens (its suffix):

    row = [prefix_1, suffix_1a, suffix_1b, …, prefix_2, suffix_2a, …]

Suffix tokens take positions p, p + 1, … and attend to their group's prefix and causally to their own suffix; prefix
tokens attend causally within the prefix. Every token so sees exactly the tokens it sees in its own sequence, at the
same positions: hidden states equal the per-sequence forward's up to float rounding, and a prefix token's gradient
sums what its members' losses send it, as the per-sequence sum does. A group computes p + Σ suffix tokens instead of
Σ lengths; identical sequences (a confident policy's samples often are) are computed once.

Grouping (``prefix_groups``): sorted lexicographically, sequences sharing a prefix are adjacent, and a run of them
shares the minimum of its neighbours' common prefixes; a dynamic programme over the sorted order picks the runs that
save the most tokens, Σ_groups (k_g − 1) · p_g (one level of sharing: a group's members share one prefix).

    plan = SharedPrefixPlan.of(sequences)
    with packed_row_attention(model, SHARED_PREFIX_SDPA):
        hidden_RH = model.model(input_ids=plan.input_ids_R[None], position_ids=plan.positions_R[None],
                                shared_prefix_plan=plan, use_cache=False).last_hidden_state[0]
    hidden of sequence s, token t: hidden_RH[plan.rows[s][t]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise

import torch
from torch import Tensor, nn
from transformers import AttentionInterface

SHARED_PREFIX_SDPA = "shared_prefix_sdpa"


@dataclass(frozen=True)
class PrefixGroup:
    """Sequences (by index) whose first ``shared`` tokens are equal; a group of one shares its whole sequence."""

    members: tuple[int, ...]
    shared: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length


def prefix_groups(sequences: Sequence[Sequence[int]]) -> list[PrefixGroup]:
    """Groups of ``sequences`` maximising the tokens saved, Σ_g (k_g − 1) · p_g, over contiguous runs of the
    lexicographic order (module docstring); ties keep sequences apart. Groups and members come in that order."""
    if any(len(sequence) == 0 for sequence in sequences):
        raise ValueError("prefix sharing needs sequences of at least one token")
    order = sorted(range(len(sequences)), key=lambda i: (tuple(sequences[i]), i))
    adjacent = [common_prefix(sequences[a], sequences[b]) for a, b in pairwise(order)]
    saved = [0] * (len(order) + 1)  # saved[j]: the most tokens saved grouping order[:j]
    start_of = list(range(-1, len(order)))  # start_of[j]: where the last group of that best grouping starts
    for end in range(1, len(order) + 1):
        saved[end], start_of[end] = saved[end - 1], end - 1
        shared = len(sequences[order[end - 1]])
        for start in range(end - 2, -1, -1):
            shared = min(shared, adjacent[start])
            if shared == 0:
                break
            if saved[start] + (end - start - 1) * shared > saved[end]:
                saved[end], start_of[end] = saved[start] + (end - start - 1) * shared, start
    groups: list[PrefixGroup] = []
    end = len(order)
    while end > 0:
        start = start_of[end]
        members = tuple(order[start:end])
        shared = len(sequences[members[0]]) if len(members) == 1 else min(adjacent[start : end - 1])
        groups.append(PrefixGroup(members, shared))
        end = start
    return groups[::-1]


def shared_cost(group: PrefixGroup, lengths: Sequence[int]) -> int:
    """Tokens a group computes in a shared row: its prefix once plus each member's suffix."""
    return group.shared + sum(lengths[m] - group.shared for m in group.members)


@dataclass(frozen=True)
class SharedPrefixPlan:
    """A shared row of sequences: the model's inputs ``input_ids_R`` / ``positions_R`` (R = Σ_g p_g + suffixes), the
    groups' pieces for the attention, and ``rows[s][t]``, the row that holds token t of sequence s."""

    input_ids_R: Tensor
    positions_R: Tensor
    groups: tuple[tuple[int, tuple[int, ...]], ...]  # per group: prefix length, its members' non-empty suffix lengths
    rows: tuple[Tensor, ...]
    _masks: dict[tuple[int, int, torch.device], Tensor] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, sequences: Sequence[Sequence[int]], share: bool = True) -> SharedPrefixPlan:
        """The plan of ``prefix_groups(sequences)`` (``share=False``: every sequence its own group, i.e. plain
        per-sequence packing); ``rows`` in the order of ``sequences``."""
        ids: list[int] = []
        positions: list[int] = []
        groups: list[tuple[int, tuple[int, ...]]] = []
        rows: list[Tensor | None] = [None] * len(sequences)
        alone = [PrefixGroup((index,), len(sequence)) for index, sequence in enumerate(sequences)]
        for group in prefix_groups(sequences) if share else alone:
            prefix_start, p = len(ids), group.shared
            ids += sequences[group.members[0]][:p]
            positions += range(p)
            suffixes = []
            for member in group.members:
                suffix = sequences[member][p:]
                own = torch.arange(len(suffix)) + len(ids)
                rows[member] = torch.cat([torch.arange(prefix_start, prefix_start + p), own])
                if suffix:
                    ids += suffix
                    positions += range(p, p + len(suffix))
                    suffixes.append(len(suffix))
            groups.append((p, tuple(suffixes)))
        return cls(torch.tensor(ids), torch.tensor(positions), tuple(groups), tuple(rows))  # type: ignore[arg-type]

    @cached_property
    def piece_lengths(self) -> list[int]:
        """Lengths of the row's pieces in order: each group's prefix, then its suffixes."""
        return [length for prefix, suffixes in self.groups for length in (prefix, *suffixes)]

    def suffix_mask(self, prefix: int, suffix: int, device: torch.device) -> Tensor:
        """(suffix, prefix + suffix) bool: suffix token i attends to the whole prefix and suffix tokens 0..i (built
        once per shape and device: every layer asks again)."""
        key = (prefix, suffix, device)
        if key not in self._masks:
            self._masks[key] = torch.ones(suffix, prefix + suffix, dtype=torch.bool, device=device).tril(prefix)
        return self._masks[key]

    def to(self, device: torch.device) -> SharedPrefixPlan:
        rows = tuple(r.to(device) for r in self.rows)
        return SharedPrefixPlan(self.input_ids_R.to(device), self.positions_R.to(device), self.groups, rows)


def shared_prefix_sdpa(
    module: nn.Module,
    query_1HRd: Tensor,
    key_1KRd: Tensor,
    value_1KRd: Tensor,
    attention_mask: Tensor | None,
    shared_prefix_plan: SharedPrefixPlan | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """Attention over a shared row (module docstring): per group, causal SDPA on the prefix, then each suffix against
    the prefix's keys and values and its own, causally. Returns (1, R, H, d)."""
    if shared_prefix_plan is None or attention_mask is not None:
        raise ValueError(f"{SHARED_PREFIX_SDPA} needs the row's shared_prefix_plan and no attention mask")
    options = {"scale": kwargs.get("scaling"), "dropout_p": kwargs.get("dropout", 0.0) if module.training else 0.0}
    options["enable_gqa"] = query_1HRd.shape[1] != key_1KRd.shape[1]
    # One split per tensor (its backward is one cat), as per_sequence_sdpa does.
    pieces = [iter(t.split(shared_prefix_plan.piece_lengths, dim=2)) for t in (query_1HRd, key_1KRd, value_1KRd)]
    outputs = []
    for prefix, suffixes in shared_prefix_plan.groups:
        query, key_prefix, value_prefix = (next(piece) for piece in pieces)
        attend = torch.nn.functional.scaled_dot_product_attention
        outputs.append(attend(query, key_prefix, value_prefix, is_causal=True, **options))
        for suffix in suffixes:
            query, key, value = (next(piece) for piece in pieces)
            mask = shared_prefix_plan.suffix_mask(prefix, suffix, query.device)
            key, value = torch.cat([key_prefix, key], dim=2), torch.cat([value_prefix, value], dim=2)
            outputs.append(attend(query, key, value, attn_mask=mask, **options))
    return torch.cat(outputs, dim=2).transpose(1, 2).contiguous(), None


AttentionInterface.register(SHARED_PREFIX_SDPA, shared_prefix_sdpa)
