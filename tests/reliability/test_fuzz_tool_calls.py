"""Fuzzing the tool-call parser (``parse_turn``) with what a hostile or confused model writes: arbitrary text, near-miss
markup, deep nesting, huge numbers, lone surrogates and line separators. The contract: it never raises; every turn is
exactly one of tool calls, a parse failure (messages telling the model what to fix) or a final answer; well-formed
calls come back as written."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from envs.harness.parsing import (
    THINK_CLOSE,
    THINK_OPEN,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ParsedTurn,
    ToolCall,
    parse_turn,
)
from envs.jsonio import MAX_DEPTH

MARKERS = (TOOL_CALL_OPEN, TOOL_CALL_CLOSE, THINK_OPEN, THINK_CLOSE)

# Pieces a model's near-miss markup is made of: the tags and their typos, JSON punctuation, keys, hostile values.
FRAGMENTS = st.sampled_from(
    [
        *MARKERS,
        "<tool_call",
        "tool_call>",
        "</tool_call",
        "<tool_calls>",
        "<TOOL_CALL>",
        "< tool_call>",
        "<think",
        "think>",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        '"',
        '"name"',
        '"arguments"',
        '"fs_read"',
        '{"name": "fs_read", "arguments": {}}',
        '{"name": "fs_read", "arguments": "{\\"a\\": 1}"}',
        '{"name": "", "arguments": {}}',
        '{"name": "x", "arguments": []}',
        '"arguments": "not json"',
        "9" * 5000,
        "1e999",
        "-1e999",
        "NaN",
        "Infinity",
        "[" * (MAX_DEPTH + 1),
        "]" * (MAX_DEPTH + 1),
        "[" * 5000,
        "\\ud800",
        "\\udcff",
        "\ud800",
        "\udcff",
        "\u2028",
        "\u2029",
        "\x85",
        "\x00",
        "\n",
        "\r\n",
        "\t",
    ]
)
HOSTILE_TEXT = st.lists(st.one_of(FRAGMENTS, st.text()), max_size=30).map("".join)


def assert_one_outcome(parsed: ParsedTurn) -> None:
    """Exactly one of calls, errors, final answer; a parse failure says something; calls are well-formed."""
    outcomes = [bool(parsed.calls), bool(parsed.errors), parsed.final_answer is not None]
    assert outcomes.count(True) == 1, parsed
    assert all(isinstance(message, str) and message for message in parsed.errors)
    for call in parsed.calls:
        assert isinstance(call, ToolCall) and call.name and call.name == call.name.strip()
        assert isinstance(call.arguments, dict)


@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    assert_one_outcome(parse_turn(text))


@given(HOSTILE_TEXT)
def test_near_miss_markup_never_raises(text: str) -> None:
    assert_one_outcome(parse_turn(text))


@given(HOSTILE_TEXT)
def test_a_hostile_tool_call_body_is_a_correction_or_a_call(body: str) -> None:
    parsed = parse_turn(f"{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}")
    assert_one_outcome(parsed)
    assert parsed.final_answer is None or not parsed.final_answer  # a tag pair never leaves a visible answer


@given(st.integers(min_value=0, max_value=3 * MAX_DEPTH), st.sampled_from(["[", '{"a":']))
def test_nesting_at_any_depth_is_a_call_or_a_correction(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    value = opener * depth + "0" + closer * depth
    parsed = parse_turn(f'{TOOL_CALL_OPEN}{{"name": "t", "arguments": {{"x": {value}}}}}{TOOL_CALL_CLOSE}')
    assert_one_outcome(parsed)
    if depth + 2 <= MAX_DEPTH:  # the arguments object and its key add one level each over the nested value
        assert parsed.calls == (ToolCall("t", {"x": json.loads(value)}),)
    else:
        assert parsed.errors and "nested deeper than" in parsed.errors[0]


# --- valid calls round-trip -------------------------------------------------------------------------------------------

# Text a well-formed call may hold: anything but the four markers, which the turn is split on before any JSON is read
# (a model writes them inside an argument as JSON escapes, e.g. "\u003ctool_call>").
SAFE_TEXT = st.text().filter(lambda text: not any(marker in text for marker in MARKERS))
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**4000), max_value=10**4000),
    st.floats(allow_nan=False),  # NaN != NaN: it parses, but cannot be compared after the round trip
    SAFE_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(SAFE_TEXT, children, max_size=4)),
    max_leaves=20,
)
NAMES = SAFE_TEXT.filter(lambda name: name.strip() != "")
CALLS = st.builds(ToolCall, NAMES, st.dictionaries(SAFE_TEXT, JSON_VALUES, max_size=5))


def render(call: ToolCall, *, as_string: bool, ascii_only: bool, indent: int | None) -> str:
    arguments: Any = json.dumps(call.arguments, ensure_ascii=ascii_only) if as_string else call.arguments
    body = json.dumps({"name": call.name, "arguments": arguments}, ensure_ascii=ascii_only, indent=indent)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _same(left: Any, right: Any) -> bool:
    """Equality that also holds for -0.0 vs 0.0 and the infinities JSON writes for out-of-range floats."""
    if isinstance(left, float) and isinstance(right, float):
        return left == right or (math.isinf(left) and math.isinf(right) and (left > 0) == (right > 0))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    return type(left) is type(right) and left == right


@given(
    st.lists(CALLS, min_size=1, max_size=4),
    st.lists(SAFE_TEXT, min_size=5, max_size=5),
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 0, 2]),
    st.one_of(st.none(), SAFE_TEXT),
)
def test_valid_calls_round_trip(
    calls: list[ToolCall],
    between: list[str],
    as_string: bool,
    ascii_only: bool,
    indent: int | None,
    thought: str | None,
) -> None:
    blocks = [render(call, as_string=as_string, ascii_only=ascii_only, indent=indent) for call in calls]
    text = "".join(gap + block for gap, block in zip(between, blocks, strict=False))
    if thought is not None:
        text = f"{THINK_OPEN}{thought}{THINK_CLOSE}{text}"
    parsed = parse_turn(text)
    assert not parsed.errors and parsed.final_answer is None, parsed
    assert len(parsed.calls) == len(calls)
    for got, sent in zip(parsed.calls, calls, strict=True):
        assert got.name == sent.name.strip() and _same(got.arguments, sent.arguments)


@given(SAFE_TEXT, st.one_of(st.none(), SAFE_TEXT))
def test_text_without_markup_is_the_final_answer(answer: str, thought: str | None) -> None:
    text = answer if thought is None else f"{THINK_OPEN}{thought}{THINK_CLOSE}{answer}"
    assert parse_turn(text) == ParsedTurn(final_answer=answer.strip())


@given(st.text(), st.dictionaries(st.text(), st.text(), max_size=4))
def test_markup_inside_arguments_round_trips_when_escaped(name: str, arguments: dict[str, str]) -> None:
    """The one way to pass a literal ``<tool_call>`` / ``<think>`` in an argument: JSON-escape its ``<``."""
    body = json.dumps({"name": f"t{name}", "arguments": arguments}).replace("<", "\\u003c")
    parsed = parse_turn(f"{TOOL_CALL_OPEN}{body}{TOOL_CALL_CLOSE}")
    assert parsed.calls == (ToolCall(f"t{name}".strip(), arguments),), parsed
