"""Prefix-shared packing: the grouping by hand and against brute force, the row's layout by hand, and log-probs,
entropies and gradients equal to the per-sequence packed row's."""

import copy
import itertools
import random

import pytest
import torch

from trainer.local.batch import shared_prefix_bins
from trainer.local.logprobs import Layout, token_stats
from trainer.local.prefix_sharing import PrefixGroup, SharedPrefixPlan, common_prefix, prefix_groups, shared_cost


def test_common_prefix_by_hand():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([7], [8]) == 0


def test_groups_by_hand():
    # a deep group of three beats a shallow group of four: saves 2·4 = 8 tokens, not 3·2 = 6
    deep = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [1, 2, 3, 4, 7], [1, 2, 8], [9]]
    assert prefix_groups(deep) == [PrefixGroup((0, 1, 2), 4), PrefixGroup((3,), 3), PrefixGroup((4,), 1)]
    # a wide shallow group beats a deep pair: 4·2 = 8 against 3 + 2·2 = 7
    wide = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 6], [1, 2, 7], [1, 2, 8]]
    assert prefix_groups(wide) == [PrefixGroup((0, 1, 2, 3, 4), 2)]
    # identical sequences share all their tokens; on a tie (one more member for a shorter prefix) groups stay apart
    assert prefix_groups([[5, 6], [5, 6], [5]]) == [PrefixGroup((2,), 1), PrefixGroup((0, 1), 2)]
    with pytest.raises(ValueError, match="at least one token"):
        prefix_groups([[1], []])


def _saved(groups: list[PrefixGroup]) -> int:
    return sum((len(group.members) - 1) * group.shared for group in groups)


def test_groups_save_the_most_any_split_of_the_sorted_order_saves():
    rng = random.Random(0)
    for _ in range(200):
        sequences = [[rng.randrange(3) for _ in range(rng.randint(1, 5))] for _ in range(rng.randint(1, 7))]
        groups = prefix_groups(sequences)
        assert sorted(m for g in groups for m in g.members) == list(range(len(sequences)))
        for group in groups:  # every member really starts with the group's prefix
            assert all(
                sequences[m][: group.shared] == sequences[group.members[0]][: group.shared] for m in group.members
            )
            assert group.shared <= min(len(sequences[m]) for m in group.members)
        order = sorted(range(len(sequences)), key=lambda i: (tuple(sequences[i]), i))
        best = 0
        for cuts in itertools.product([False, True], repeat=len(order) - 1):
            runs, run = [], [order[0]]
            for cut, index in zip(cuts, order[1:], strict=True):
                if cut:
                    runs.append(run)
                    run = []
                run.append(index)
            runs.append(run)
            shared = [min(common_prefix(sequences[r[0]], sequences[m]) for m in r) for r in runs]
            best = max(best, sum((len(r) - 1) * s for r, s in zip(runs, shared, strict=True)))
        assert _saved(groups) == best


def test_the_plan_lays_out_each_prefix_once_by_hand():
    plan = SharedPrefixPlan.of([[1, 2, 3], [1, 2, 4, 5], [9], [1, 2]])
    # group (3, 0, 1) shares [1, 2] (member 3 has no suffix), then [9] alone
    assert plan.input_ids_R.tolist() == [1, 2, 3, 4, 5, 9]
    assert plan.positions_R.tolist() == [0, 1, 2, 2, 3, 0]
    assert [rows.tolist() for rows in plan.rows] == [[0, 1, 2], [0, 1, 3, 4], [5], [0, 1]]
    assert plan.groups == ((2, (1, 2)), (1, ()))
    assert plan.piece_lengths == [2, 1, 2, 1]
    mask = plan.suffix_mask(2, 2, torch.device("cpu"))
    assert mask.tolist() == [[True, True, True, False], [True, True, True, True]]


def test_bins_keep_groups_together_within_the_budget():
    prompt = [7] * 10
    sequences = [[*prompt, i, i] for i in range(4)] + [[8] * 5 + [i] for i in range(3)] + [[9] * 30]
    bins = shared_prefix_bins(sequences, budget=20)
    assert sorted(m for b in bins for m in b) == list(range(8))
    assert [7] in bins  # over the budget alone: a bin of its own
    for bin_ in bins:
        if bin_ != [7]:
            held = [sequences[m] for m in bin_]
            assert sum(shared_cost(g, [len(s) for s in held]) for g in prefix_groups(held)) <= 20
    # the prompt group costs 10 + 4·2 = 18: it stays whole; cut to a budget of 14 it pays the prompt twice
    assert sorted([0, 1, 2, 3]) in [sorted(b) for b in bins]
    assert sorted(sorted(b) for b in shared_prefix_bins(sequences[:4], budget=14)) == [[0, 1], [2, 3]]


def _grouped_tokens(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows that share prompts as GRPO groups do: two groups, an identical pair, a prompt-only row, a loner."""
    generator = torch.Generator().manual_seed(3)

    def draw(n: int) -> list[int]:
        return torch.randint(2, vocab, (n,), generator=generator).tolist()

    first, second = draw(9), draw(5)
    rows = [first + draw(4), first + draw(7), first, second + draw(3), second + draw(6), draw(11)]
    rows.insert(2, list(rows[0]))
    tokens_SL = torch.zeros((len(rows), max(map(len, rows))), dtype=torch.long)
    for s, row in enumerate(rows):
        tokens_SL[s, : len(row)] = torch.tensor(row)
    return tokens_SL, torch.tensor([len(row) for row in rows])


def _stats_and_grads(model, tokens_SL, lengths_S, layout, score_SL=None):
    model = copy.deepcopy(model)
    stats = token_stats(model, tokens_SL, lengths_S, layout, score_SL)
    stats.logprobs_SL.sum().backward()
    return stats, {name: p.grad for name, p in model.named_parameters()}


def test_shared_rows_give_the_packed_rows_numbers(model):
    tokens_SL, lengths_S = _grouped_tokens(model.config.vocab_size)
    plan = SharedPrefixPlan.of([row[:n] for row, n in zip(tokens_SL.tolist(), lengths_S.tolist(), strict=True)])
    assert len(plan.input_ids_R) < int(lengths_S.sum()) * 0.65  # the sharing is real: 81 tokens in ~49 rows
    packed, packed_grads = _stats_and_grads(model, tokens_SL, lengths_S, Layout.PACKED)
    shared, shared_grads = _stats_and_grads(model, tokens_SL, lengths_S, Layout.SHARED_PREFIX)
    assert torch.allclose(shared.logprobs_SL, packed.logprobs_SL, atol=1e-5)
    assert torch.allclose(shared.entropy_SL, packed.entropy_SL, atol=1e-5)
    for name, grad in packed_grads.items():
        assert torch.allclose(shared_grads[name], grad, rtol=1e-4, atol=1e-6), name


@pytest.mark.parametrize("layout", list(Layout))
def test_scoring_only_the_loss_tokens_leaves_them_unchanged(model, layout):
    tokens_SL, lengths_S = _grouped_tokens(model.config.vocab_size)
    score_SL = torch.rand(tokens_SL.shape, generator=torch.Generator().manual_seed(0)) < 0.4
    full, _ = _stats_and_grads(model, tokens_SL, lengths_S, layout)
    scored, _ = _stats_and_grads(model, tokens_SL, lengths_S, layout, score_SL)
    kept = score_SL & (torch.arange(tokens_SL.shape[1])[None] < lengths_S[:, None])
    kept[:, 0] = False
    assert torch.allclose(scored.logprobs_SL[kept], full.logprobs_SL[kept], atol=1e-6)
    assert torch.allclose(scored.entropy_SL[kept], full.entropy_SL[kept], atol=1e-6)
    assert (scored.logprobs_SL[~kept] == 0).all() and (scored.entropy_SL[~kept] == 0).all()
    with pytest.raises(ValueError, match="score_SL has shape"):
        token_stats(model, tokens_SL, lengths_S, layout, score_SL[:, :-1])
