"""Tool-call dialects: what each writes reads back the same; the Qwen3-Coder XML dialect types values by the tool's
schema as vLLM does and refuses, in words a model can act on, what vLLM would pass through as a string; our chat
template renders a conversation's calls exactly as the policy writes them."""

from __future__ import annotations

import pytest

from envs.harness.parsing import MISMATCH, ParsedTurn, ToolCall, dialect_mismatch, parse_turn
from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName, call_example
from envs.harness.tool_formats.qwen3_xml import schema_types, typed_value
from trainer.tokenizer import chat_template, train_tokenizer

XML = ToolFormatName.QWEN3_XML
SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "cell": {"type": "string"},
        "row": {"type": "integer"},
        "scale": {"type": "number"},
        "exact": {"type": "boolean"},
        "options": {"type": "object"},
        "cells": {"type": "array", "items": {"type": "string"}},
        "note": {"type": ["string", "null"]},
        "mode": {"enum": ["sum", "mean"]},
    },
}
SCHEMAS = {"sheets_read_cell": SCHEMA}
ARGUMENTS = {
    "path": "models/deal.xlsx",
    "cell": "C5",
    "row": 12,
    "scale": 0.5,
    "exact": True,
    "options": {"nested": {"a": [1, 2]}},
    "cells": ["A1", "B2"],
    "note": "two\nlines — ünïcode </tool_call",
    "mode": "mean",
}


@pytest.mark.parametrize("tool_format", list(ToolFormatName))
def test_what_a_dialect_writes_reads_back_typed(tool_format: ToolFormatName) -> None:
    text = TOOL_FORMATS[tool_format].call_text("sheets_read_cell", ARGUMENTS)
    reasoned = f"<think>\nwhich cell?\n</think>\n\nLet me look.\n{text}\n{text}"
    parsed = parse_turn(reasoned, tool_format, SCHEMAS)
    assert parsed == ParsedTurn(calls=(ToolCall("sheets_read_cell", ARGUMENTS),) * 2)


def test_the_issues_example_and_vllms_typing() -> None:
    text = "<tool_call>\n<function=sheets_read_cell>\n<parameter=path>\nm.xlsx\n</parameter>\n<parameter=cell>\nC5\n"
    text += "</parameter>\n<parameter=row>\n7.0\n</parameter>\n<parameter=exact>\n1\n</parameter>\n"
    text += "<parameter=note>\nNULL\n</parameter>\n</function>\n</tool_call>"
    [call] = parse_turn(text, XML, SCHEMAS).calls
    assert call.arguments == {"path": "m.xlsx", "cell": "C5", "row": 7, "exact": True, "note": None}
    assert isinstance(call.arguments["row"], int)
    assert typed_value("3.0", {"type": "number"}) == 3 and typed_value("2.5", {"type": "number"}) == 2.5
    with pytest.raises(ValueError, match="integer"):
        typed_value("2.5", {"type": "integer"})
    assert schema_types({"anyOf": [{"type": "integer"}, {"type": "string"}]}) == ["integer", "string"]
    assert typed_value("  x  ", {}) == "  x  "  # no type: the text as written
    untyped = parse_turn(text.replace("sheets_read_cell", "other_tool"), XML, SCHEMAS).calls[0]
    assert untyped.arguments["row"] == "7.0"  # a tool without a known schema keeps strings, as vLLM does


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("<function=sheets_read_cell>\n<parameter=colour>\nred\n</parameter>\n</function>", "no parameter 'colour'"),
        ("<function=sheets_read_cell>\n<parameter=row>\ntwelve\n</parameter>\n</function>", "row must be integer"),
        ("<function=sheets_read_cell>\n<parameter=exact>\nyes\n</parameter>\n</function>", "exact must be boolean"),
        ("<function=sheets_read_cell>\n<parameter=cells>\nA1, B2\n</parameter>\n</function>", "cells must be array"),
        ("<function=sheets_read_cell>\n<parameter=scale>\ninf\n</parameter>\n</function>", "scale must be number"),
        ("<function=sheets_read_cell>\n<parameter=path>\na\n<parameter=cell>\nC5\n</parameter>\n</function>",
         "not closed"),
        ("<function=sheets_read_cell>\n<parameter=path>\na\n</parameter>\n", "not closed with </function>"),
        ("<function=sheets_read_cell>\n<parameter=cell>\nA\n</parameter>\n<parameter=cell>\nB\n</parameter>\n</function>",
         "given twice"),
        ("<function=sheets_read_cell>\nC5\n</function>", "text after the last parameter"),
        ("<function=>\n</function>", "names no tool"),
        ('{"name": "sheets_read_cell", "arguments": {}}', "holds no <function=NAME>"),
    ],
)  # fmt: skip
def test_an_xml_call_that_cannot_run_as_written_is_refused_with_the_reason(body: str, message: str) -> None:
    parsed = parse_turn(f"<tool_call>\n{body}\n</tool_call>", XML, SCHEMAS)
    assert not parsed.calls and message in parsed.errors[0], parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<tool_call>\n<function=a>\n</function>", "never closed"),
        ("<function=a>\n</function>\n</tool_call>", "no matching"),
        ("I will call <function=a>\n</function> now", "must be inside <tool_call>"),
        ("<think>\n<tool_call>", "never closed"),
        ("<think>\nstill thinking", "inside <think>"),
    ],
)
def test_a_misplaced_block_is_refused(text: str, message: str) -> None:
    assert message in parse_turn(text, XML, SCHEMAS).errors[0]


def test_reasoning_is_dropped_before_parsing_and_ends_where_vllm_ends_it() -> None:
    call = TOOL_FORMATS[XML].call_text("sheets_read_cell", {"cell": "C5"})
    assert parse_turn("<think>\nmaybe C5?\n</think>\n\nThe value is 7.", XML, SCHEMAS) == ParsedTurn(
        final_answer="The value is 7."
    )
    thinking_into_a_call = parse_turn(f"<think>\nmaybe {call}\n</think>\n\n", XML, SCHEMAS)
    assert thinking_into_a_call == ParsedTurn(calls=(ToolCall("sheets_read_cell", {"cell": "C5"}),))


@pytest.mark.parametrize("tool_format", list(ToolFormatName))
def test_our_template_renders_a_conversations_calls_as_the_policy_writes_them(tool_format: ToolFormatName) -> None:
    """The chat route (vLLM's chat completions, a re-render) and the token-in path see the same text for a call."""
    tokenizer = train_tokenizer(["tool call text"] * 10, vocab_size=400, tool_format=tool_format)
    assert tokenizer.chat_template == chat_template(tool_format)
    arguments = {"path": "m.xlsx", "row": 3, "cells": ["A1"]}
    message = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "t", "arguments": arguments}}]}
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "U"}, message], tokenize=False)
    written = TOOL_FORMATS[tool_format].call_text("t", arguments)
    assert rendered.endswith(f"<|im_start|>assistant\n{written}<|im_end|>")
    assert "<tool_call>" in call_example(TOOL_FORMATS[tool_format])
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "U"}], add_generation_prompt=True,
                                           tokenize=False, enable_thinking=False)  # fmt: skip
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize(("written", "read"), [(XML, ToolFormatName.HERMES_JSON), (ToolFormatName.HERMES_JSON, XML)])
def test_a_turn_in_another_dialect_is_named_as_one(written: ToolFormatName, read: ToolFormatName) -> None:
    text = TOOL_FORMATS[written].call_text("sheets_read_cell", {"cell": "C5"})
    parsed = parse_turn(text, read, SCHEMAS)
    assert not parsed.calls and parsed.errors[-1] == dialect_mismatch(written, read)
    assert MISMATCH.search(parsed.errors[-1]).groups() == (written.value, read.value)
    assert dialect_mismatch(written, read) not in parse_turn("<tool_call>\nnonsense\n</tool_call>", read).errors
