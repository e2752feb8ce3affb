"""Hermes JSON tool calls (Qwen2.5, Qwen3; vLLM ``--tool-call-parser hermes``)::

    <tool_call>
    {"name": "sheets_read_cell", "arguments": {"path": "m.xlsx", "sheet": "Model", "cell": "C5"}}
    </tool_call>

A turn may hold several blocks. A block whose body is not a JSON object with a non-empty ``name`` and an object of
``arguments`` (a JSON string holding one is accepted; omitted means none), an unclosed ``<tool_call>`` or a stray
``</tool_call>`` is an error the model reads. JSON is read through ``envs.jsonio`` (bounded nesting and integers).
The arguments keep their JSON types: the schemas are not needed to read them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envs.harness.tool_formats.base import CLOSE, OPEN, Schemas, TemplatePieces, ToolCall, ToolFormatName, parse_blocks
from envs.jsonio import JsonError, parse_json

TEMPLATE = TemplatePieces(
    tools=(
        "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}"
        "{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
        "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
        "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within '"
        '    \'<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": '
        "<args-json-object>}\\n</tool_call>' }}"
    ),
    call=(
        '{{- \'\\n<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
        "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
        "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
        "{{- '}\\n</tool_call>' }}"
    ),
)


def parse_tool_call(body: str) -> ToolCall:
    """One ``<tool_call>`` body → ``ToolCall``; raises ValueError with a message the model can act on."""
    payload = _json_object(body, "the tool call")
    name = payload.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError('the tool call has no "name" (a non-empty string naming the tool)')
    return ToolCall(name.strip(), _json_object(payload.get("arguments", {}), f'"arguments" of {name}'))


def _json_object(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a JSON object; a string is parsed first (models write ``arguments`` either way)."""
    if isinstance(value, str):
        try:
            value = parse_json(value)
        except JsonError as error:
            raise ValueError(f"{what} is not valid JSON ({error}): {value.strip()[:200]}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


class HermesJson:
    name = ToolFormatName.HERMES_JSON
    vllm_parser = "hermes"
    vllm_reasoning_parser = "qwen3"
    template = TEMPLATE

    def call_text(self, name: str, arguments: Mapping[str, Any]) -> str:
        return f"{OPEN}\n{json.dumps({'name': name, 'arguments': dict(arguments)})}\n{CLOSE}"

    def parse_calls(self, visible: str, schemas: Schemas | None) -> tuple[list[ToolCall], list[str], str]:
        return parse_blocks(visible, parse_tool_call)


HERMES_JSON = HermesJson()
