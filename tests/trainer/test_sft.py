"""The SFT loss: mean next-token NLL over loss-masked target positions only, computed on the packed batch."""

import pytest
import torch

from trainer.model import END_OF_TEXT, IM_END, TinyModelSpec, build_tiny_model
from trainer.sft import masked_nll, pack
from trainer.traces import TokenizedTrace


def test_the_packed_loss_equals_each_sequence_on_its_own():
    spec = TinyModelSpec(layers=2, hidden=64, heads=1, kv_heads=1, head_dim=64, intermediate=128, seed=0)
    model = build_tiny_model(spec, vocab_size=50, special_ids={IM_END: 1, END_OF_TEXT: 0})
    generator = torch.Generator().manual_seed(0)
    lengths, masked = (12, 5, 9), ((5, 9), (1, 3), (2, 9))  # different lengths: no sequence sees another's tokens
    examples = []
    for length, (start, stop) in zip(lengths, masked, strict=True):
        mask = [int(start <= t < stop) for t in range(length)]
        examples.append(TokenizedTrace(torch.randint(2, 50, (length,), generator=generator).tolist(), mask))
    # two more sharing the first one's first 7 tokens (loss tokens among them), one of them twice
    for tail, mask in (([3, 4, 5], [0] * 4 + [1] * 6), ([9], [0] * 6 + [1] * 2)):
        examples.append(TokenizedTrace(examples[0].tokens[:7] + tail, mask))
    examples.append(examples[-1])
    nll_sum, targets = 0.0, 0
    for example in examples:
        tokens, mask = torch.tensor([example.tokens]), torch.tensor(example.loss_mask[1:], dtype=torch.bool)
        logits = model(input_ids=tokens[:, :-1]).logits[0]
        full = torch.nn.functional.cross_entropy(logits, tokens[0, 1:], reduction="none")
        nll_sum, targets = nll_sum + full[mask].sum(), targets + int(mask.sum())
    assert torch.allclose(masked_nll(model, pack(examples)), nll_sum / targets, atol=1e-6)
    unmasked = [TokenizedTrace(e.tokens, [0] * len(e.tokens)) for e in examples]
    assert masked_nll(model, pack(unmasked)).item() == 0.0


def test_pack_lays_the_sequences_back_to_back():
    batch = pack([TokenizedTrace([5, 6, 7], [0, 1, 1]), TokenizedTrace([8, 9], [0, 1])])
    assert batch.plan.input_ids_R.tolist() == [5, 6, 8] and batch.plan.positions_R.tolist() == [0, 1, 0]
    assert batch.score_rows_M.tolist() == [0, 1, 2] and batch.targets_M.tolist() == [6, 7, 9]
    with pytest.raises(ValueError, match="at least 2 tokens"):
        pack([TokenizedTrace([5], [1])])
    with pytest.raises(ValueError, match="a mask entry per token"):
        pack([TokenizedTrace([5, 6, 7], [0, 1])])


def test_a_shared_prefix_is_stored_once_and_its_targets_counted_per_example():
    batch = pack([TokenizedTrace([5, 6, 7, 8], [0, 1, 1, 1]), TokenizedTrace([5, 6, 9], [0, 1, 0])])
    # inputs [5, 6, 7] and [5, 6]: the second is the first's prefix, so the row is [5, 6, 7]
    assert batch.plan.input_ids_R.tolist() == [5, 6, 7] and batch.plan.positions_R.tolist() == [0, 1, 2]
    # targets 6 (row 0) of both examples, 7 (row 1) and 8 (row 2) of the first; 9 is not trained on
    assert sorted(zip(batch.score_rows_M.tolist(), batch.targets_M.tolist(), strict=True)) == [
        (0, 6),
        (0, 6),
        (1, 7),
        (2, 8),
    ]
