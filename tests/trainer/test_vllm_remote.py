"""A tied model as the fleet serves it to vLLM: untied, and every weights folder it loads carries the head."""

import asyncio
import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from trainer.model import bootstrap_policy, save_policy
from trainer.specs import TinyModelSpec
from trainer.vllm.remote import RemoteEngines, RemoteFleet, ties_embeddings, untied_copy

SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=256)


def test_an_untied_copy_serves_the_same_function_and_loads_carry_the_head(tmp_path: Path) -> None:
    model, tokenizer = bootstrap_policy([f"memo {i} of client {i % 5}" for i in range(50)], SPEC, vocab_size=300)
    base = save_policy(model, tokenizer, tmp_path / "base")
    assert ties_embeddings(base) and "lm_head.weight" not in load_file(base / "model.safetensors")
    served = untied_copy(base, tmp_path / "served")
    weights = load_file(served / "model.safetensors")
    assert not json.loads((served / "config.json").read_text())["tie_word_embeddings"]
    assert torch.equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    assert (served / "tokenizer.json").is_file() and not ties_embeddings(served)

    engines = RemoteEngines(urls=("http://x",), model="p", staging_dir=tmp_path / "staging", untied_head=True)
    fleet = RemoteFleet(engines)
    loaded = fleet._stage(lambda tmp: fleet._save(dict(load_file(base / "model.safetensors")), tmp))
    staged = load_file(loaded / "model.safetensors")
    assert torch.equal(staged["lm_head.weight"], staged["model.embed_tokens.weight"])
    asyncio.run(fleet.aclose())
