"""Packed (and padded) per-token log-probs, entropies and gradients equal a plain per-sequence transformers forward."""

import copy
import math
from itertools import pairwise
from types import SimpleNamespace

import pytest
import torch
import transformers

from trainer.local import packed_attention
from trainer.local.logprobs import Layout, token_stats
from trainer.local.packed_attention import PER_SEQUENCE_SDPA, per_sequence_sdpa, sequence_bounds

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


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_and_padded_gradients_equal_unpacked_ones(model, attention):
    """The loss Σ log π over every sequence has the same gradient whichever way the micro-batch is laid out."""
    model.config._attn_implementation = attention
    tokens_SL, lengths_S = padded_tokens(LENGTHS, model.config.vocab_size)

    def gradients(loss_fn) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        loss_fn().backward()
        return [p.grad.clone() for p in model.parameters()]

    def unpacked_loss() -> torch.Tensor:
        return sum(
            token_stats(model, tokens_SL[s : s + 1, :length], lengths_S[s : s + 1], Layout.PADDED).logprobs_SL.sum()
            for s, length in enumerate(LENGTHS)
        )

    reference = gradients(unpacked_loss)
    for layout in Layout:
        grads = gradients(lambda layout=layout: token_stats(model, tokens_SL, lengths_S, layout).logprobs_SL.sum())
        worst = max(float((g - r).abs().max()) for g, r in zip(grads, reference, strict=True))
        assert worst < 1e-5, (layout, worst)
    assert model.config._attn_implementation == attention  # the packed forward restored the model's own attention


def test_sequence_bounds_by_hand():
    assert sequence_bounds(torch.tensor([2, 1, 2])).tolist() == [0, 2, 3, 5]
    assert sequence_bounds(torch.tensor([2, 1, 2])).dtype == torch.int32


def test_packed_forward_builds_no_dense_mask(model, monkeypatch):
    """Per-sequence attention gets no mask and the boundaries of every sequence in every layer."""
    calls = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        calls.append((attention_mask, kwargs["cu_seq_lens_q"].tolist()))
        return per_sequence_sdpa(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(transformers.AttentionInterface._global_mapping, PER_SEQUENCE_SDPA, spy)
    tokens_SL, lengths_S = padded_tokens([2, 1, 2], model.config.vocab_size)
    token_stats(model, tokens_SL, lengths_S)
    assert calls == [(None, [0, 2, 3, 5])] * model.config.num_hidden_layers


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


def reference_varlen_attn(q_NHd, k_NHd, v_NHd, cu_q, cu_k, max_q, max_k, *, scale, window_size):
    """What torch's flash varlen kernel computes, by SDPA per sequence: the contract our call relies on."""
    assert torch.equal(cu_q, cu_k) and window_size == (-1, 0) and max_q == max_k == int(cu_q.diff().max())
    assert q_NHd.shape == k_NHd.shape == v_NHd.shape  # KV heads already repeated to the query heads
    outputs = []
    for a, b in pairwise(cu_q.tolist()):
        q, k, v = (t[a:b].transpose(0, 1) for t in (q_NHd, k_NHd, v_NHd))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
        outputs.append(out.transpose(0, 1))
    return torch.cat(outputs)


def test_fused_varlen_call_equals_the_per_sequence_loop(model, monkeypatch):
    """The CUDA path's layout (transposes, offsets, causal window, GQA, scale) checked on the CPU against a reference
    kernel; the kernel itself is checked on a GPU by test_fused_varlen_on_cuda."""
    tokens_SL, lengths_S = padded_tokens(LENGTHS, model.config.vocab_size)
    loop = token_stats(model, tokens_SL, lengths_S).logprobs_SL
    monkeypatch.setattr(packed_attention, "varlen_attn", reference_varlen_attn)
    monkeypatch.setattr(packed_attention, "fused_varlen_applies", lambda query, dropout: True)
    fused = token_stats(model, tokens_SL, lengths_S).logprobs_SL
    assert float((fused - loop).detach().abs().max()) < 1e-5


def test_fused_varlen_applies_only_to_cuda_half_precision():
    query = torch.zeros(1, 2, 3, 4)
    assert not packed_attention.fused_varlen_applies(query, 0.0)
    assert not packed_attention.fused_varlen_applies(query.bfloat16(), 0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on a lent GPU: gpu_check.sh)")
def test_fused_varlen_on_cuda(model):
    """bf16 on CUDA: packed log-probs (one flash varlen kernel) ≈ padded ones, gradients flow."""
    assert packed_attention.varlen_attn is not None
    cuda_model = copy.deepcopy(model).to("cuda", torch.bfloat16)
    tokens_SL, lengths_S = (t.cuda() for t in padded_tokens(LENGTHS, model.config.vocab_size))
    assert packed_attention.fused_varlen_applies(torch.zeros(1, device="cuda", dtype=torch.bfloat16), 0.0)
    packed = token_stats(cuda_model, tokens_SL, lengths_S, Layout.PACKED).logprobs_SL
    padded = token_stats(cuda_model, tokens_SL, lengths_S, Layout.PADDED).logprobs_SL
    assert float((packed - padded).detach().abs().max()) < 0.05  # bf16 rounding, two kernels
    packed.sum().backward()
    assert cuda_model.model.embed_tokens.weight.grad.abs().sum() > 0
