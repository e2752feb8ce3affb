"""The contract of a tool-call dialect (``envs.harness.tool_formats``): its name, the call it parses to, its template
pieces and the ``ToolFormat`` protocol every dialect module implements."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

Schemas = Mapping[str, Mapping[str, Any]]
"""Each tool's JSON input schema, by the name the model calls it."""


class ToolFormatName(StrEnum):
    HERMES_JSON = "hermes_json"
    """``<tool_call>{"name": …, "arguments": {…}}</tool_call>``: Qwen2.5, Qwen3 (vLLM ``--tool-call-parser hermes``)."""
    QWEN3_XML = "qwen3_xml"
    """``<tool_call><function=NAME><parameter=P>value</parameter></function></tool_call>`` — Qwen3-Coder, Qwen3.5,
    Qwen3.6 (vLLM ``--tool-call-parser qwen3_coder``)."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TemplatePieces:
    """Jinja for the project's chat template: ``tools`` lists the tools inside the system turn (``tools`` is the
    OpenAI function list); ``call`` renders one ``tool_call`` (a ``{name, arguments}`` mapping) of an assistant turn,
    starting with a newline."""

    tools: str
    call: str


class ToolFormat(Protocol):
    name: ToolFormatName
    vllm_parser: str
    """vLLM's ``--tool-call-parser`` for this dialect (``--enable-auto-tool-choice`` with it)."""
    vllm_reasoning_parser: str
    """vLLM's ``--reasoning-parser`` for the family's ``<think>`` blocks."""
    template: TemplatePieces

    def call_text(self, name: str, arguments: Mapping[str, Any]) -> str:
        """A call as the model writes it."""
        ...

    def parse_calls(self, visible: str, schemas: Schemas | None) -> tuple[list[ToolCall], list[str], str]:
        """The calls in ``visible`` (reasoning dropped), the errors (none of the turn's calls runs when there is
        one), and the text outside the calls."""
        ...


OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


def parse_blocks(visible: str, parse_body: Callable[[str], ToolCall]) -> tuple[list[ToolCall], list[str], str]:
    """Every ``<tool_call>`` … ``</tool_call>`` block of ``visible`` read by ``parse_body`` (its ValueError is the
    model's error), an unclosed or unopened block as an error, and the text outside the blocks: what both Qwen
    dialects share around their bodies."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    for body in _BLOCK.findall(visible):
        try:
            calls.append(parse_body(body))
        except ValueError as error:
            errors.append(str(error))
    rest = _BLOCK.sub("", visible)
    if OPEN in rest:
        errors.append(f"a {OPEN} is never closed with {CLOSE}")
    elif CLOSE in rest:
        errors.append(f"a {CLOSE} has no matching {OPEN}")
    return calls, errors, rest


def vllm_chat_flags(tool_format: ToolFormat, thinking: bool | None) -> list[str]:
    """The flags that make vLLM's chat route read this dialect's calls (and the family's reasoning, when it thinks)."""
    flags = ["--enable-auto-tool-choice", "--tool-call-parser", tool_format.vllm_parser]
    return flags + (["--reasoning-parser", tool_format.vllm_reasoning_parser] if thinking else [])


def call_example(tool_format: ToolFormat) -> str:
    """The call format with placeholders: shown after a compact tool listing and in a correction."""
    return tool_format.call_text("<tool name>", {"<arg>": "<value>"})
