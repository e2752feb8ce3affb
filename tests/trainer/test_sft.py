"""The SFT loss: mean next-token NLL over loss-masked target positions only."""

import torch

from trainer.model import END_OF_TEXT, IM_END, TinyModelSpec, build_tiny_model
from trainer.sft import masked_nll


def test_masked_nll_equals_full_logits_cross_entropy_on_masked_targets():
    spec = TinyModelSpec(layers=2, hidden=64, heads=1, kv_heads=1, head_dim=64, intermediate=128, seed=0)
    model = build_tiny_model(spec, vocab_size=50, special_ids={IM_END: 1, END_OF_TEXT: 0})
    tokens = torch.randint(2, 50, (3, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.zeros(3, 12, dtype=torch.long)
    mask[0, 5:9] = 1
    mask[2, 1:3] = 1
    logits = model(input_ids=tokens[:, :-1]).logits
    full = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    expected = (full * mask[:, 1:]).sum() / mask[:, 1:].sum()
    assert torch.allclose(masked_nll(model, tokens, mask), expected, atol=1e-6)
    assert masked_nll(model, tokens, torch.zeros_like(mask)).item() == 0.0
