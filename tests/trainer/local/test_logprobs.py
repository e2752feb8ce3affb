"""Packed (and padded) per-token log-probs and entropies equal a plain per-sequence transformers forward."""

import math
from types import SimpleNamespace

import pytest
import torch

from trainer.local.logprobs import Layout, block_causal_mask, token_stats

LENGTHS = [5, 17, 1, 9, 2]


def padded_tokens(lengths: list[int], vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    tokens_SL = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    for s, length in enumerate(lengths):
        tokens_SL[s, :length] = torch.randint(2, vocab, (length,), generator=generator)
    return tokens_SL, torch.tensor(lengths)


def reference(model, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log π(x_t | x_<t) and H_t for t ≥ 1 from one unpacked forward of a single sequence."""
    with torch.no_grad():
        logits = model(tokens[None]).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    entropy = -(logprobs.exp() * logprobs).sum(-1)
    return logprobs.gather(-1, tokens[1:, None])[:, 0], entropy


@pytest.mark.parametrize("layout", list(Layout))
def test_stats_equal_unpacked_per_sequence_forward(model, layout):
    tokens_SL, lengths_S = padded_tokens(LENGTHS, model.config.vocab_size)
    stats = token_stats(model, tokens_SL, lengths_S, layout)
    assert stats.logprobs_SL.shape == stats.entropy_SL.shape == tokens_SL.shape
    for s, length in enumerate(LENGTHS):
        logprobs, entropy = reference(model, tokens_SL[s, :length])
        # max |Δ| < 1e-5 in fp32 (allclose with rtol 0; also holds for the length-1 sequence with nothing to score)
        assert torch.allclose(stats.logprobs_SL[s, 1:length], logprobs, rtol=0, atol=1e-5)
        assert torch.allclose(stats.entropy_SL[s, 1:length], entropy, rtol=0, atol=1e-5)
        # nothing predicts the first token; padding carries zeros
        assert stats.logprobs_SL[s, 0] == 0 and stats.entropy_SL[s, 0] == 0
        assert stats.logprobs_SL[s, length:].abs().sum() == 0 and stats.entropy_SL[s, length:].abs().sum() == 0
    # an untrained model over 300 tokens is close to uniform: H ≈ log 300
    assert stats.entropy_SL[1, 1:].mean().item() == pytest.approx(math.log(300), abs=0.1)


def test_packed_logprobs_carry_gradients(model):
    tokens_SL, lengths_S = padded_tokens([4, 6], model.config.vocab_size)
    stats = token_stats(model, tokens_SL, lengths_S)
    stats.logprobs_SL.sum().backward()
    assert model.model.embed_tokens.weight.grad.abs().sum() > 0
    assert not stats.entropy_SL.requires_grad


def test_block_causal_mask_by_hand():
    mask = block_causal_mask(torch.tensor([2, 1, 2]), torch.float32)[0, 0]
    allowed = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [0, 0, 1, 0, 0],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 1, 1],
    ]
    assert torch.equal(mask == 0, torch.tensor(allowed, dtype=torch.bool))
    assert mask.min() == torch.finfo(torch.float32).min


def test_bad_inputs_are_named(model):
    tokens_SL, _ = padded_tokens([3, 3], model.config.vocab_size)
    with pytest.raises(ValueError, match="lengths must lie in \\[1, 3\\]"):
        token_stats(model, tokens_SL, torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="one length per row"):
        token_stats(model, tokens_SL, torch.tensor([3]))
    flash = SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    with pytest.raises(ValueError, match="use layout 'padded'"):
        token_stats(flash, tokens_SL, torch.tensor([3, 3]))
    with pytest.raises(KeyError, match="unknown micro-batch layout 'ragged'"):
        token_stats(model, tokens_SL, torch.tensor([3, 3]), "ragged")
