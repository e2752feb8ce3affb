"""Tiny Qwen3 bootstrap, save and load."""

import json

import pytest
import torch
from pydantic import ValidationError
from transformers import Qwen3ForCausalLM

from envs.harness.agent import HarnessConfig
from envs.harness.policy import HARNESS_FILE, PolicyHarness, read_policy_harness
from trainer.model import TinyModelSpec, bootstrap_policy, build_tiny_model, load_policy, save_policy

CORPUS = [f"memo {i}: the client margin is {i * 7 % 100}% of revenue" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=256)
SPECIAL = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}


@pytest.fixture(scope="module")
def policy():
    return bootstrap_policy(CORPUS, SPEC, vocab_size=400)


def test_build_follows_the_spec(policy):
    model, tok = policy
    cfg = model.config
    assert isinstance(model, Qwen3ForCausalLM)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (2, 64, 2, 1)
    assert (cfg.head_dim, cfg.intermediate_size, cfg.max_position_embeddings) == (64, 128, 256)
    assert cfg.vocab_size == len(tok)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied, as small Qwen3
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    assert model.generation_config.eos_token_id == [im_end, eot]
    assert model.model.layers[0].self_attn.q_proj.weight.shape == (2 * 64, 64)  # heads * head_dim x hidden


def test_seed_decides_the_weights_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_model(SPEC, 300, SPECIAL)
    assert torch.equal(torch.rand(1), expected_next)
    b = build_tiny_model(SPEC, 300, SPECIAL)
    c = build_tiny_model(SPEC.model_copy(update={"seed": 1}), 300, SPECIAL)
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_save_load_round_trip(policy, tmp_path):
    model, tok = policy
    path = save_policy(model, tok, tmp_path / "step-0")
    assert (path / "model.safetensors").is_file() and (path / "config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["step-0"]  # no temp folder left behind
    loaded, loaded_tok = load_policy(path)
    ids = torch.tensor([tok.encode("memo 7: the client margin")])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert loaded_tok.encode("memo 7") == tok.encode("memo 7")
    save_policy(model, tok, path)  # overwriting an existing checkpoint works
    assert (path / "model.safetensors").is_file()


def test_save_writes_the_harness_with_the_weights(policy, tmp_path):
    model, tok = policy
    settings = PolicyHarness(apps=("filesystem",), harness=HarnessConfig(context_budget_tokens=256, max_turns=2))
    path = save_policy(model, tok, tmp_path / "step-1", harness=settings)
    assert read_policy_harness(path) == settings
    assert [p.name for p in tmp_path.iterdir()] == ["step-1"]  # written inside the temp folder, renamed with it
    assert not (save_policy(model, tok, tmp_path / "step-2") / HARNESS_FILE).exists()


def test_load_refuses_what_is_not_a_qwen3_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        load_policy(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match="'llama'"):
        load_policy(tmp_path)


def test_spec_and_special_ids_are_validated():
    with pytest.raises(ValidationError, match="multiple of kv_heads"):
        TinyModelSpec(heads=3, kv_heads=2)
    with pytest.raises(ValidationError, match="head_dim"):
        TinyModelSpec(head_dim=63)
    with pytest.raises(ValueError, match="lacks"):
        build_tiny_model(SPEC, 300, {"<|im_end|>": 2})
    with pytest.raises(ValueError, match="outside the vocabulary"):
        build_tiny_model(SPEC, 300, {**SPECIAL, "<|im_end|>": 300})


def test_perturbed_weights_move_each_tensor_by_its_share_of_its_size_once() -> None:
    from trainer.loops.policy import perturb_weights_

    model = build_tiny_model(SPEC, 300, SPECIAL)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    perturb_weights_(model, 0.05)
    after = model.state_dict()
    for name, tensor in before.items():
        if tensor.numel() > 1 and tensor.is_floating_point():
            moved, rms = (after[name] - tensor).float(), tensor.float().square().mean().sqrt()
            assert 0.03 < float(moved.std() / rms) < 0.07, name  # once: the tied lm_head is not moved twice


def test_a_perturbed_policy_is_a_copy_with_other_weights_and_the_same_harness(policy, tmp_path) -> None:
    from trainer.loops.policy import perturbed_policy

    model, tok = policy
    harness = PolicyHarness.from_training(HarnessConfig(max_turns=3), ("sheets",))
    source = save_policy(model, tok, tmp_path / "trained", harness=harness)
    damaged = perturbed_policy(source, tmp_path / "damaged", relative_std=0.3)
    original, _ = load_policy(source)
    copy, copy_tok = load_policy(damaged)
    assert read_policy_harness(damaged) == harness and len(copy_tok) == len(tok)
    before, after = original.state_dict(), copy.state_dict()
    assert all(not torch.equal(before[name], after[name]) for name in list(before)[:3])
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())  # source intact
