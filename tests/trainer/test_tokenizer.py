"""Tokenizer: byte-level round trips, special tokens, the Qwen-style chat template and TITO deltas."""

import itertools

import pytest
from transformers import AutoTokenizer

from trainer.tokenizer import (
    CONTROL_TOKENS,
    MARKUP_TOKENS,
    chat_delta_ids,
    render_chat,
    save_tokenizer,
    special_token_ids,
    train_tokenizer,
)

WORDS = ["revenue", "margin", "client", "memo", "deal", "model", "sheet", "quarter", "board", "filing"]
CORPUS = [
    f"The {a} {b} of {c} rose {i % 37}.{i % 10}% in Q{i % 4 + 1}"
    for i, (a, b, c) in enumerate(itertools.product(WORDS, repeat=3))
]

CONVERSATION = [
    {"role": "system", "content": "You are an analyst."},
    {"role": "user", "content": "Sum column B."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "read_sheet", "arguments": {"path": "a.xlsx"}}}],
    },
    {"role": "tool", "content": "B: 1, 2, 3"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "calc", "arguments": '{"expr": "1+2+3"}'}}],
    },
    {"role": "tool", "content": "6"},
    {"role": "assistant", "content": "<think>\nadd\n</think>\nThe sum is 6."},
    {"role": "user", "content": "Thanks — and column C? 🙂"},
]


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(CORPUS, vocab_size=512)


def test_vocab_size_bounds_and_too_small_vocab(tok):
    assert 256 + len(CONTROL_TOKENS) + len(MARKUP_TOKENS) < len(tok) <= 512
    with pytest.raises(ValueError, match="vocab_size=100"):
        train_tokenizer(CORPUS, vocab_size=100)


@pytest.mark.parametrize(
    "text",
    ["The revenue margin of client rose 3.4%", "héllo wörld — ünïcode 🙂 中文", "  leading\ttabs\n\nand  spaces ", ""],
)
def test_round_trip_any_text(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_special_tokens_are_single_ids_and_only_control_tokens_are_skipped(tok):
    ids = special_token_ids(tok)
    assert len(set(ids.values())) == len(CONTROL_TOKENS) + len(MARKUP_TOKENS)
    for text, token_id in ids.items():
        assert tok.encode(text, add_special_tokens=False) == [token_id]
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    ids_ = tok.encode("<tool_call>x</tool_call><|im_end|>", add_special_tokens=False)
    assert tok.decode(ids_, skip_special_tokens=True) == "<tool_call>x</tool_call>"


def test_template_renders_qwen_format(tok):
    expected = (
        "<|im_start|>system\nYou are an analyst.<|im_end|>\n"
        "<|im_start|>user\nSum column B.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "read_sheet", "arguments": {"path": "a.xlsx"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nB: 1, 2, 3\n</tool_response><|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"expr": "1+2+3"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    assert render_chat(tok, CONVERSATION[:5], add_generation_prompt=True) == expected


def test_template_lists_tools_in_the_system_turn(tok):
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    text = render_chat(tok, CONVERSATION[:2], tools=tools)
    assert text.startswith("<|im_start|>system\nYou are an analyst.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "calc", "parameters": {}}}\n</tools>' in text
    assert text.endswith("<|im_end|>\n<|im_start|>user\nSum column B.<|im_end|>")
    assert text.count("<|im_start|>system") == 1


def test_unknown_role_is_refused(tok):
    with pytest.raises(Exception, match="unknown chat role: robot"):
        render_chat(tok, [{"role": "robot", "content": "hi"}])


@pytest.mark.parametrize("split", range(len(CONVERSATION)))
def test_delta_appends_token_wise(tok, split):
    before, new = CONVERSATION[:split], CONVERSATION[split:]
    full_ids = tok.encode(render_chat(tok, CONVERSATION, add_generation_prompt=True), add_special_tokens=False)
    before_ids = tok.encode(render_chat(tok, before), add_special_tokens=False)
    assert before_ids + chat_delta_ids(tok, before, new) == full_ids


def test_rendered_prefix_ends_at_the_stop_token(tok):
    # TITO: the engine stops on <|im_end|>, so turn N's tokens end exactly where render(history) ends.
    ids = tok.encode(render_chat(tok, CONVERSATION[:3]), add_special_tokens=False)
    assert ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    delta = chat_delta_ids(tok, CONVERSATION[:3], CONVERSATION[3:4])
    assert tok.decode(delta) == "\n<|im_start|>user\n<tool_response>\nB: 1, 2, 3\n</tool_response><|im_end|>\n" + (
        "<|im_start|>assistant\n"
    )


def test_saved_tokenizer_loads_with_auto_tokenizer(tok, tmp_path):
    save_tokenizer(tok, tmp_path / "tok")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "tok")
    text = "The deal memo 🙂 <tool_call>{}</tool_call>"
    assert loaded.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
    assert render_chat(loaded, CONVERSATION, add_generation_prompt=True) == render_chat(
        tok, CONVERSATION, add_generation_prompt=True
    )
    assert not [p for p in (tmp_path / "tok").iterdir() if p.name.startswith(".")]


def test_numbers_are_split_into_single_digits():
    """Values a model must copy are tokenised digit by digit, whatever merges the corpus would suggest."""
    from trainer.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["revenue 412.5 412.5 412.5 and 2025 2025 2025"] * 50, vocab_size=400)
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode("412.5", add_special_tokens=False))
    assert pieces == ["4", "1", "2", ".", "5"]
    assert (
        tokenizer.decode(tokenizer.encode("EBITDA 2025: 1,234.5m", add_special_tokens=False)) == "EBITDA 2025: 1,234.5m"
    )
