"""Tool-call dialects: how a model family is told about its tools, how it writes a call, and how a call is read back.

Qwen2.5 and Qwen3 call tools in Hermes JSON (``hermes_json``); Qwen3-Coder, Qwen3.5 and Qwen3.6 — the models the recipe
post-trains — in the Qwen3-Coder XML dialect (``qwen3_xml``), whose parameter values are untyped text that the tool's
JSON schema types. A ``ToolFormat`` owns its three parts:

* **advertise** — ``template``: the chat template's pieces for the project's own tokenizer (how its system prompt
  lists the tools, how an assistant turn's ``tool_calls`` are rendered in history; a real checkpoint brings its own
  template), and ``call_example`` (``call_text`` with placeholders) after a compact tool listing;
* **parse** — ``parse_calls(visible, schemas)``: the calls in a turn's text (reasoning already dropped), errors a model
  can act on, and the text left outside the calls;
* **render** — ``call_text(name, arguments)``: a call as the model writes it (bootstrap traces, correction examples);
  results come back as the template's ``tool`` turn (``<tool_response>``), the same in both dialects.

Adding a dialect is one module with a ``ToolFormat`` and one line in ``TOOL_FORMATS``.

    dialect = TOOL_FORMATS[ToolFormatName.QWEN3_XML]
    dialect.call_text("sheets_read_cell", {"path": "m.xlsx", "cell": "C5"})    # what the model writes
    calls, errors, rest = dialect.parse_calls(text, {"sheets_read_cell": schema})
"""

from __future__ import annotations

from envs.harness.tool_formats.base import (
    Schemas,
    TemplatePieces,
    ToolCall,
    ToolFormat,
    ToolFormatName,
    call_example,
    vllm_chat_flags,
)
from envs.harness.tool_formats.hermes_json import HERMES_JSON
from envs.harness.tool_formats.qwen3_xml import QWEN3_XML

TOOL_FORMATS: dict[ToolFormatName, ToolFormat] = {HERMES_JSON.name: HERMES_JSON, QWEN3_XML.name: QWEN3_XML}

__all__ = [
    "TOOL_FORMATS",
    "Schemas",
    "TemplatePieces",
    "ToolCall",
    "ToolFormat",
    "ToolFormatName",
    "call_example",
    "vllm_chat_flags",
]
