"""Bootstrap a tiny Qwen3 policy locally and save / load policies as ordinary HF checkpoint folders.

The tiny model is transformers' own `Qwen3ForCausalLM` (RMSNorm, q/k-norm, RoPE, GQA, SwiGLU, tied embeddings as in
the small Qwen3 checkpoints), randomly initialised from `TinyModelSpec.seed`. A policy folder is what
`save_pretrained` writes (config.json, generation_config.json, model.safetensors) plus the tokenizer files, so
`load_policy` also reads a downloaded Hugging Face checkpoint folder — of a Qwen3 model only (``model_type: qwen3`` in
its config.json): it builds a `Qwen3ForCausalLM` and the engine's forward pass is Qwen3's, so any other architecture
(Qwen2/2.5 included) is refused with an ``UnsupportedPolicy`` error naming the model type. A policy the project
trained also carries ``harness.json`` (``envs.harness.policy``): the harness settings it was trained with, which evals
and later runs use.

    spec = TinyModelSpec()
    model = build_tiny_model(spec, vocab_size=len(tok), special_ids=special_token_ids(tok))
    save_policy(model, tok, "runs/x/policy/step-0", harness=PolicyHarness.from_training(config.harness, apps))
    model, tok = load_policy("runs/x/policy/step-0")
    model, tok = bootstrap_policy(corpus_texts, TinyModelSpec())    # tokenizer + model in one call
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from transformers import (
    AutoTokenizer,
    GenerationConfig,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from envs.errors import RecipeError
from envs.files import staged_dir
from envs.harness.policy import PolicyHarness, write_policy_harness
from trainer.specs import TinyModelSpec
from trainer.tokenizer import END_OF_TEXT, IM_END, special_token_ids, train_tokenizer


def build_tiny_model(spec: TinyModelSpec, vocab_size: int, special_ids: Mapping[str, int]) -> Qwen3ForCausalLM:
    """A freshly initialised fp32 Qwen3ForCausalLM; `special_ids` maps token text to id (<|im_end|>, <|endoftext|>).

    Generation stops on <|im_end|> and <|endoftext|>, like Qwen3's generation_config.
    """
    missing = {IM_END, END_OF_TEXT} - set(special_ids)
    if missing:
        raise ValueError(f"special_ids lacks {sorted(missing)}")
    bad = {t: i for t, i in special_ids.items() if not 0 <= i < vocab_size}
    if bad:
        raise ValueError(f"special token ids outside the vocabulary of {vocab_size}: {bad}")
    eos, pad = special_ids[IM_END], special_ids[END_OF_TEXT]
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        rms_norm_eps=spec.rms_norm_eps,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    # Seed a forked RNG so building a model neither depends on nor disturbs the caller's global torch RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad)
    return model.eval()


def bootstrap_policy(
    texts: Iterable[str], spec: TinyModelSpec, vocab_size: int = 4096
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerFast]:
    """Train the tokenizer on `texts` and build a fresh tiny model sized to it: the policy of the local profile."""
    tokenizer = train_tokenizer(texts, vocab_size)
    return build_tiny_model(spec, len(tokenizer), special_token_ids(tokenizer)), tokenizer


def save_policy(
    model: Qwen3ForCausalLM,
    tokenizer: PreTrainedTokenizerBase,
    directory: str | os.PathLike[str],
    harness: PolicyHarness | None = None,
) -> Path:
    """Save weights (safetensors), config, tokenizer and — when given — the harness settings (``harness.json``) into
    `directory`, atomically (``staged_dir``: a hidden sibling folder is filled, fsynced and swapped in whole), so a
    reader never sees a half-written checkpoint or one of empty files, nor weights without the harness they were
    trained with."""
    target = Path(directory)
    with staged_dir(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if harness is not None:
            write_policy_harness(tmp, harness)
    return target


class NotAPolicyFolder(RecipeError, FileNotFoundError):
    """A policy path that holds no checkpoint (no config.json)."""


class UnsupportedPolicy(RecipeError, ValueError):
    """A checkpoint of a model type the local engine and trainer do not run."""


def load_policy(
    directory: str | os.PathLike[str], dtype: torch.dtype = torch.float32
) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerBase]:
    """Load (model in eval mode, tokenizer) from a policy folder written by `save_policy` or a Hugging Face Qwen3
    checkpoint folder; a folder without config.json is ``NotAPolicyFolder``, any other ``model_type``
    ``UnsupportedPolicy`` (both ``RecipeError``s: the CLI prints one line)."""
    path = Path(directory)
    if not (path / "config.json").is_file():
        raise NotAPolicyFolder(f"{path} is not a checkpoint folder (no config.json)")
    model_type = json.loads((path / "config.json").read_text()).get("model_type")
    if model_type != Qwen3Config.model_type:
        raise UnsupportedPolicy(f"{path} holds a {model_type!r} model; the policy must be a Qwen3 ('qwen3') checkpoint")
    model = Qwen3ForCausalLM.from_pretrained(path, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model.eval(), tokenizer
