"""Parse one generated assistant turn: Qwen/Hermes-style tool calls or a final answer (pure functions).

Format (what the chat template's system prompt asks for)::

    <think>optional reasoning</think>
    optional text
    <tool_call>
    {"name": "sheets_read_cell", "arguments": {"path": "m.xlsx", "sheet": "Model", "cell": "C5"}}
    </tool_call>
    <tool_call>{"name": ..., "arguments": {...}}</tool_call>

Rules: reasoning (``<think>…</think>``, or everything before a lone ``</think>`` when the generation prompt opened the
block) is dropped first. A turn with one or more well-formed ``<tool_call>`` blocks is a tool turn; a turn with none is
the final answer (the remaining text, stripped). Any malformed block (bad JSON, deep nesting or an over-long integer
included (``envs.jsonio``); no ``name``; ``arguments`` not an object; an unclosed tag; an unfinished ``<think>``)
makes the whole turn a parse failure whose messages tell the model what to fix; none of its calls run, so a
half-understood turn never touches the world.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from envs.jsonio import JsonError, parse_json

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_THINK_BLOCK = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)
_TOOL_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedTurn:
    """``calls`` (tool turn), ``errors`` (parse failure) or ``final_answer`` (neither): exactly one is non-empty."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[str, ...] = ()
    final_answer: str | None = None


def strip_think(text: str) -> str:
    """Drop reasoning: closed ``<think>…</think>`` blocks, then everything up to a remaining lone ``</think>``."""
    text = _THINK_BLOCK.sub("", text)
    if THINK_CLOSE in text:
        text = text[text.rindex(THINK_CLOSE) + len(THINK_CLOSE) :]
    return text


def parse_tool_call(body: str) -> ToolCall:
    """One ``<tool_call>`` body → ``ToolCall``; raises ValueError with a message the model can act on.

    ``arguments`` may be omitted (no-argument tools) or given as a JSON string holding an object.
    """
    try:
        payload = parse_json(body)
    except JsonError as error:
        raise ValueError(f"the tool call is not valid JSON ({error}): {body.strip()[:200]}") from None
    if not isinstance(payload, dict):
        raise ValueError(f"the tool call must be a JSON object, got {type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError('the tool call has no "name" (a non-empty string naming the tool)')
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = parse_json(arguments)
        except JsonError as error:
            raise ValueError(f'"arguments" of {name} is a string that is not JSON: {error}') from None
    if not isinstance(arguments, dict):
        raise ValueError(f'"arguments" of {name} must be a JSON object, got {type(arguments).__name__}')
    return ToolCall(name.strip(), arguments)


def parse_turn(text: str) -> ParsedTurn:
    """Classify a generated turn (decoded without control tokens) as tool calls, a parse failure or a final answer."""
    if THINK_OPEN in _THINK_BLOCK.sub("", text):
        return ParsedTurn(errors=("the turn ends inside <think>: close it with </think> before answering",))
    visible = strip_think(text)
    calls: list[ToolCall] = []
    errors: list[str] = []
    for body in _TOOL_BLOCK.findall(visible):
        try:
            calls.append(parse_tool_call(body))
        except ValueError as error:
            errors.append(str(error))
    rest = _TOOL_BLOCK.sub("", visible)
    if TOOL_CALL_OPEN in rest:
        errors.append(f"a {TOOL_CALL_OPEN} is never closed with {TOOL_CALL_CLOSE}")
    elif TOOL_CALL_CLOSE in rest:
        errors.append(f"a {TOOL_CALL_CLOSE} has no matching {TOOL_CALL_OPEN}")
    if errors:
        return ParsedTurn(errors=tuple(errors))
    if calls:
        return ParsedTurn(calls=tuple(calls))
    return ParsedTurn(final_answer=visible.strip())
