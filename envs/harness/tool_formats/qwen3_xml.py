"""Qwen3-Coder XML tool calls (Qwen3-Coder, Qwen3.5, Qwen3.6; vLLM ``--tool-call-parser qwen3_coder``)::

    <tool_call>
    <function=sheets_read_cell>
    <parameter=path>
    m.xlsx
    </parameter>
    <parameter=cell>
    C5
    </parameter>
    </function>
    </tool_call>

A value is the text between ``<parameter=P>`` and the first ``</parameter>`` after it, one leading and one trailing
newline removed (the template's markup), typed by the tool's JSON schema as vLLM types it (``coerce_to_schema_type``:
the schema's types tried in the order null, integer, number, boolean, object, array, string — ``null`` for null,
Python's ``int``/``float`` for numbers (a number with no fraction becomes an int, ``7.0`` an integer too, as JSON
Schema counts it), ``true``/``false``/``1``/``0`` for booleans, JSON for objects and arrays; a property without a type
is a string). Unlike vLLM, which passes anything it
cannot type through as a string, a turn is refused — with a message the model can act on — when a value converts to
none of its types, when a parameter is not in the tool's schema, when a block is unclosed or out of place, or when a
parameter is given twice: a half-understood call never runs. Tools without a known schema keep every value a string.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from envs.harness.tool_formats.base import CLOSE, OPEN, Schemas, TemplatePieces, ToolCall, ToolFormatName, parse_blocks
from envs.jsonio import JsonError, parse_json

FUNCTION, FUNCTION_CLOSE = "<function=", "</function>"
PARAMETER, PARAMETER_CLOSE = "<parameter=", "</parameter>"
_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*?)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]*)>(.*?)</parameter>", re.DOTALL)
TYPE_ORDER = ("null", "integer", "number", "boolean", "object", "array", "string")
"""vLLM's priority when a schema allows several types."""
TYPE_ALIASES = {"str": "string", "text": "string", "int": "integer", "float": "number", "bool": "boolean"}
TYPE_ALIASES |= {"dict": "object", "list": "array"}

TEMPLATE = TemplatePieces(
    tools=(
        "{{- '# Tools\\n\\nYou have access to the following functions:\\n\\n<tools>' }}"
        "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
        "{{- '\\n</tools>\\n\\nIf you choose to call a function ONLY reply in the following format with NO '"
        "    'suffix:\\n\\n'"
        "    '<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1\\n'"
        "    '</parameter>\\n</function>\\n</tool_call>' }}"
    ),
    call=(
        "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>' }}"
        "{%- for key, value in tool_call.arguments | items %}"
        "{{- '\\n<parameter=' + key + '>\\n' }}"
        "{%- if value is string %}{{- value }}{%- else %}{{- value | tojson }}{%- endif %}"
        "{{- '\\n</parameter>' }}"
        "{%- endfor %}"
        "{{- '\\n</function>\\n</tool_call>' }}"
    ),
)


def schema_types(schema: Mapping[str, Any] | None) -> list[str]:
    """The JSON types a property allows (``type``, a list of them, ``enum`` values, ``anyOf``/``oneOf``), in vLLM's
    order of trying; ``["string"]`` when the schema says nothing."""
    if not isinstance(schema, Mapping):
        return ["string"]
    found: set[str] = set()
    declared = schema.get("type")
    for name in [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []:
        if isinstance(name, str):
            found.add(TYPE_ALIASES.get(name.strip().lower(), name.strip().lower()))
    for value in schema.get("enum") or ():
        found.add(_json_type(value))
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key) or ():
            found.update(schema_types(option))
    return [name for name in TYPE_ORDER if name in found] or ["string"]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string" if isinstance(value, str) else "object" if isinstance(value, dict) else "array"


def _convert(text: str, kind: str) -> Any:
    """``text`` as a value of JSON type ``kind``; ValueError when it is not one."""
    if kind == "string":
        return text
    if kind == "null":
        if text.strip().lower() == "null":
            return None
        raise ValueError
    if kind in ("integer", "number"):
        try:
            return int(text)
        except ValueError:
            number = float(text)
        if not math.isfinite(number) or (kind == "integer" and not number.is_integer()):
            raise ValueError
        return int(number) if number.is_integer() else number
    if kind == "boolean":
        lowered = text.strip().lower()
        if lowered in ("true", "1", "false", "0"):
            return lowered in ("true", "1")
        raise ValueError
    try:
        value = parse_json(text)
    except JsonError:
        raise ValueError from None
    if _json_type(value) != kind:
        raise ValueError
    return value


def typed_value(text: str, schema: Mapping[str, Any] | None) -> Any:
    """A parameter's text typed by its property schema (module docstring); ValueError naming the types it is not."""
    types = schema_types(schema)
    for kind in types:
        try:
            return _convert(text, kind)
        except ValueError:
            continue
    raise ValueError(" or ".join(types))


def _unwrap(value: str) -> str:
    """One leading and one trailing newline off (the template writes the value on lines of its own)."""
    return value.removeprefix("\n").removesuffix("\n")


def parse_function(body: str, schemas: Schemas | None) -> ToolCall:
    """One ``<tool_call>`` body → ``ToolCall``; raises ValueError with a message the model can act on."""
    match = _FUNCTION.fullmatch(body)
    if match is None:
        if FUNCTION not in body:
            raise ValueError(f"a {OPEN} block holds no <function=NAME> … {FUNCTION_CLOSE}: {body.strip()[:200]}")
        raise ValueError(f"the <function=…> block is not closed with {FUNCTION_CLOSE}, or text surrounds it")
    name, inner = match.group(1).strip(), match.group(2)
    if not name:
        raise ValueError("<function=> names no tool: write <function=TOOL_NAME>")
    schema = (schemas or {}).get(name)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    arguments: dict[str, Any] = {}
    position = 0
    for parameter in _PARAMETER.finditer(inner):
        if inner[position : parameter.start()].strip():
            raise ValueError(
                f"{name}: text between parameters; each value goes inside <parameter=P> … {PARAMETER_CLOSE}"
            )
        position = parameter.end()
        key, text = parameter.group(1).strip(), _unwrap(parameter.group(2))
        if not key:
            raise ValueError(f"{name}: <parameter=> names no parameter")
        if PARAMETER in text:
            raise ValueError(f"{name}: parameter {key} is not closed with {PARAMETER_CLOSE} before the next one")
        if key in arguments:
            raise ValueError(f"{name}: parameter {key} is given twice")
        if isinstance(properties, Mapping) and key not in properties:
            known = ", ".join(properties) or "none"
            raise ValueError(f"{name} has no parameter {key!r} (its parameters: {known})")
        try:
            arguments[key] = typed_value(text, properties.get(key) if isinstance(properties, Mapping) else None)
        except ValueError as error:
            raise ValueError(f"{name}: parameter {key} must be {error}, got {text.strip()[:80]!r}") from None
    rest = inner[position:]
    if PARAMETER in rest:
        raise ValueError(f"{name}: a <parameter=…> is not closed with {PARAMETER_CLOSE}")
    if rest.strip():
        raise ValueError(f"{name}: text after the last parameter; each value goes inside <parameter=P> … </parameter>")
    return ToolCall(name, arguments)


class Qwen3Xml:
    name = ToolFormatName.QWEN3_XML
    vllm_parser = "qwen3_coder"
    vllm_reasoning_parser = "qwen3"
    template = TEMPLATE

    def call_text(self, name: str, arguments: Mapping[str, Any]) -> str:
        parameters = "".join(
            f"<parameter={key}>\n{value if isinstance(value, str) else json.dumps(value)}\n{PARAMETER_CLOSE}\n"
            for key, value in arguments.items()
        )
        return f"{OPEN}\n{FUNCTION}{name}>\n{parameters}{FUNCTION_CLOSE}\n{CLOSE}"

    def call_example(self) -> str:
        return (
            f"{OPEN}\n{FUNCTION}<tool name>>\n{PARAMETER}<arg>>\n<value>\n{PARAMETER_CLOSE}\n{FUNCTION_CLOSE}\n{CLOSE}"
        )

    def parse_calls(self, visible: str, schemas: Schemas | None) -> tuple[list[ToolCall], list[str], str]:
        calls, errors, rest = parse_blocks(visible, lambda body: parse_function(body, schemas))
        if not errors and FUNCTION in rest:
            errors.append(f"a <function=…> block must be inside {OPEN} … {CLOSE}")
        return calls, errors, rest


QWEN3_XML = Qwen3Xml()
