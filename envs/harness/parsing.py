"""Parse one generated assistant turn: tool calls in the policy's dialect, or a final answer (pure functions).

    <think>optional reasoning</think>
    optional text
    <tool_call>…</tool_call>          (as many as the turn makes; the dialect says what goes inside)

Rules: reasoning is dropped first, where vLLM's ``qwen3`` reasoning parser ends it — it stays in the trajectory's
tokens (sampled and trained on), it is only not read for calls. Reasoning starts at ``<think>`` (or at the turn's
start when only a ``</think>`` follows: the generation prompt opened the block) and ends at ``</think>`` or at the
first ``<tool_call>``, whichever comes first: a call is never part of the reasoning, closed or not, and a ``</think>``
after it is dropped. Later ``<think>…</think>`` blocks are dropped too.
A turn with one or more well-formed call blocks is a tool turn; a turn with none is the final answer (the remaining
text, stripped). Any malformed block (``envs.harness.tool_formats``: bad JSON or XML, a value its schema does not
allow, an unknown parameter, an unclosed tag) or an unfinished ``<think>`` makes the whole turn a parse failure whose
messages tell the model what to fix; none of its calls run, so a half-understood turn never touches the world. When
such a turn reads cleanly in another registered dialect, the errors say so (``dialect_mismatch``): a harness set to
the wrong ``tool_format`` for its model is named as that, not as a model that cannot call tools.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envs.harness.tool_formats import TOOL_FORMATS, Schemas, ToolCall, ToolFormatName
from envs.harness.tool_formats.hermes_json import parse_tool_call

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

_THINK_BLOCK = re.compile(re.escape(THINK_OPEN) + r".*?" + re.escape(THINK_CLOSE), re.DOTALL)

MISMATCH = re.compile(r"written in (\w+) but this harness reads (\w+)")
"""Finds ``dialect_mismatch``'s message in a rollout's error (de-risk counts them)."""

__all__ = ["ParsedTurn", "ToolCall", "dialect_mismatch", "parse_tool_call", "parse_turn", "strip_think"]


@dataclass(frozen=True)
class ParsedTurn:
    """``calls`` (tool turn), ``errors`` (parse failure) or ``final_answer`` (neither): exactly one is non-empty."""

    calls: tuple[ToolCall, ...] = ()
    errors: tuple[str, ...] = ()
    final_answer: str | None = None


def split_reasoning(text: str) -> tuple[str, bool]:
    """The text outside the reasoning (module docstring), and whether the reasoning is left open (no ``</think>``
    and no call after ``<think>``: the turn ended while thinking)."""
    opened = text.find(THINK_OPEN)
    start = opened + len(THINK_OPEN) if opened >= 0 else 0
    if opened < 0 and THINK_CLOSE not in text:
        return text, False
    before = text[:opened] if opened >= 0 else ""
    closed, call = text.find(THINK_CLOSE, start), text.find(TOOL_CALL_OPEN, start)
    if closed >= 0 and (call < 0 or closed < call):
        rest = text[closed + len(THINK_CLOSE) :]
    elif call >= 0:
        rest = text[call:].replace(THINK_CLOSE, "")  # vLLM drops a </think> that follows the implicit end
    else:
        return before, True
    rest = _THINK_BLOCK.sub("", rest)
    return before + rest, THINK_OPEN in rest


def strip_think(text: str) -> str:
    """``text`` without its reasoning (module docstring)."""
    return split_reasoning(text)[0]


def parse_turn(
    text: str, tool_format: ToolFormatName = ToolFormatName.HERMES_JSON, schemas: Schemas | None = None
) -> ParsedTurn:
    """Classify a generated turn (decoded without control tokens) as tool calls, a parse failure or a final answer;
    ``schemas`` (each tool's input schema) type the values of a dialect that writes them as text."""
    visible, unfinished = split_reasoning(text)
    if unfinished:
        return ParsedTurn(errors=("the turn ends inside <think>: close it with </think> before answering",))
    calls, errors, _ = TOOL_FORMATS[tool_format].parse_calls(visible, schemas)
    if errors:
        written = next((name for name in TOOL_FORMATS if name != tool_format and _clean(visible, name, schemas)), None)
        if written is not None:
            errors.append(dialect_mismatch(written, tool_format))
        return ParsedTurn(errors=tuple(errors))
    if calls:
        return ParsedTurn(calls=tuple(calls))
    return ParsedTurn(final_answer=visible.strip())


def dialect_mismatch(written: ToolFormatName, read: ToolFormatName) -> str:
    return (
        f"the calls are written in {written.value} but this harness reads {read.value}: write them as "
        f"{read.value} (or, if the model speaks {written.value}, set harness.tool_format to it)"
    )


def _clean(visible: str, tool_format: ToolFormatName, schemas: Schemas | None) -> bool:
    calls, errors, _ = TOOL_FORMATS[tool_format].parse_calls(visible, schemas)
    return bool(calls) and not errors
