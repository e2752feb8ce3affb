"""A Hugging Face Qwen3 checkpoint folder the project did not write — ``config.json``, ``model.safetensors``,
``tokenizer.json`` and ``tokenizer_config.json`` with its chat template, no ``harness.json`` — as a policy: loaded,
served by our engine, rolled out by the harness in the Qwen3-Coder XML dialect with reasoning, trained one step.

The weights are random (transformers builds the model from a config: no hub here). The tokenizer is Qwen's real
byte-level BPE when the registry package ``qwen-agent`` (installed by ``make install``, no dependencies) is there: it
ships ``qwen.tiktoken``, the 151,643 ranks Qwen2.5 and Qwen3 build on; converted here, with the Qwen3 special tokens
at their ids (``<|im_end|>`` 151645, ``<tool_call>`` 151657, ``<think>`` 151667). Qwen3.5/3.6's own Jinja template is
not in any registry package: the folder carries the project's template of that family's shape
(``trainer.tokenizer.chat_template``, XML calls, ``enable_thinking``).
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
import torch
from tokenizers import AddedToken
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from envs.apps import World
from envs.build import build_environment, load_tasks
from envs.harness.agent import AgentSetup, HarnessConfig, run_agent
from envs.harness.chat import ToolListing
from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName
from envs.harness.tools import LocalToolSession
from envs.sandbox.world_copy import fork_world
from envs.types import GradeResult
from trainer.engine import Engine, EngineConfig
from trainer.engine.completions import EngineCompletions
from trainer.local.batch import TrainBatch
from trainer.local.trainer import LocalTrainer, TrainerConfig
from trainer.model import load_policy
from trainer.tokenizer import chat_template, train_tokenizer

QWEN3_SPECIAL = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
]  # fmt: skip
"""Qwen3's added tokens, in id order from 151643."""
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN_TIKTOKEN = "qwen_agent/utils/qwen.tiktoken"
QWEN_RANKS = 151_643


def qwen_tokenizer() -> PreTrainedTokenizerFast | None:
    """Qwen's BPE from the ``qwen-agent`` wheel's ranks, with Qwen3's special tokens; None without the package."""
    spec = importlib.util.find_spec("qwen_agent")
    if spec is None or spec.submodule_search_locations is None:
        return None
    ranks = Path(next(iter(spec.submodule_search_locations))).parent / QWEN_TIKTOKEN
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(str(ranks), QWEN_PATTERN).converted()
    assert backend.get_vocab_size() == QWEN_RANKS
    # Appended in id order; the <|…|> control tokens are special (dropped when decoding without them), the markup
    # tokens are not, as in Qwen's own tokenizer.json.
    backend.add_tokens([AddedToken(t, special=t.startswith("<|"), normalized=False) for t in QWEN3_SPECIAL])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=chat_template(ToolFormatName.QWEN3_XML),
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bool]:
    """The folder, and whether its tokenizer is Qwen's own."""
    folder = tmp_path_factory.mktemp("hf") / "Qwen3-tiny"
    tokenizer = qwen_tokenizer()
    real = tokenizer is not None
    if tokenizer is None:
        tokenizer = train_tokenizer(["<tool_call> sheets_read_cell"] * 10, 400, ToolFormatName.QWEN3_XML)
    tokenizer.save_pretrained(folder)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, max_position_embeddings=2048, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    assert not (folder / "harness.json").exists()
    return folder, real


def test_qwens_own_tokenizer_has_the_family_tokens_where_qwen3_puts_them(checkpoint: tuple[Path, bool]) -> None:
    folder, real = checkpoint
    if not real:
        pytest.skip("the registry package qwen-agent (Qwen's BPE ranks) is not installed: make install")
    _, tokenizer = load_policy(folder)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in ("<|im_end|>", "<tool_call>", "<think>")}
    assert ids == {"<|im_end|>": 151645, "<tool_call>": 151657, "<think>": 151667} and len(tokenizer) == 151669
    call = TOOL_FORMATS[ToolFormatName.QWEN3_XML].call_text("sheets_read_cell", {"path": "m.xlsx", "cell": "C5"})
    assert tokenizer.decode(tokenizer.encode(call)) == call and tokenizer.encode(call)[0] == 151657


def test_a_foreign_checkpoint_rolls_out_in_the_xml_dialect_and_trains(checkpoint: tuple[Path, bool], tmp_path) -> None:
    folder, _ = checkpoint
    model, tokenizer = load_policy(folder)
    data = tmp_path / "data"
    build_environment(data)
    task = next(t for t in load_tasks(data) if t.task_id == "ib-1-toy-0001")
    harness = HarnessConfig(
        tool_listing=ToolListing.FULL, tool_format=ToolFormatName.QWEN3_XML, thinking=True, max_turns=2,
        max_tokens_per_turn=12, context_budget_tokens=2048, seed=0,
    )  # fmt: skip
    engine = Engine(model, tokenizer, EngineConfig(max_num_seqs=4, max_model_len=2048))
    try:
        world = World(fork_world(data / "worlds" / task.world_id, tmp_path / "world"))
        setup = AgentSetup(EngineCompletions(engine), tokenizer, harness)

        async def rollout():  # type: ignore[no-untyped-def]
            async with LocalToolSession(world, apps=("sheets",)) as tools:
                graded = GradeResult(criteria=[], score=0.0, passed=False)
                return await run_agent(task, tools, setup, grade_fn=lambda answer: graded, group_id="g")

        trajectory = asyncio.run(rollout())
    finally:
        engine.close()
    prompt = tokenizer.decode(trajectory.tokens[: trajectory.prompt_len])
    assert "<function=example_function_name>" in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert sum(trajectory.loss_mask) > 0 and trajectory.stop_reason is not None
    batch = TrainBatch.from_trajectories(
        [trajectory, trajectory.model_copy(update={"reward": 1.0})], TrainerConfig().algorithm
    )
    metrics = LocalTrainer(model.train(), TrainerConfig(lr=1e-4, token_budget=4096)).train_step(batch)
    assert torch.isfinite(torch.tensor(metrics.loss))
