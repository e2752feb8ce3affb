"""Render the conversation with the tokenizer's own chat template, and tokenise only what is new (TITO).

Works with any HF tokenizer whose template is Qwen-style: ``<|im_start|>role\\n…<|im_end|>``, tools advertised from
the template's ``tools`` argument, tool calls in the policy's dialect (``envs.harness.tool_formats``: Hermes JSON or
Qwen3-Coder XML), tool results rendered as a user turn wrapped in ``<tool_response>``, ``enable_thinking`` passed to
the template (Qwen3's switch: off, the generation prompt holds an empty ``<think></think>``). History is never
re-rendered: the rollout's ids are

    prompt_ids(system + user, generation prompt)
    + sampled ids of turn 1 (ending in EOS ``<|im_end|>``) + turn_close_ids + delta_ids(observations of turn 1)
    + sampled ids of turn 2 + …

``turn_close_ids`` is what the template writes after an assistant turn's EOS (``"\\n"`` in Qwen's template, nothing
in the project's prefix-stable one); ``delta_ids`` is the text the template adds for the new messages plus the next
generation prompt, cut from ``render(base + new)`` after ``render(base)`` for a fixed base conversation ending in an
assistant turn (so the cut is exactly where a real rollout's assistant turn ended).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName, call_example

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


Message = Mapping[str, Any]

ANSWER_INSTRUCTIONS = (
    "Work step by step with the tools. Call a tool by writing a <tool_call> block as shown; you may call several "
    "tools in one turn, and their results come back in <tool_response> blocks. When you know the answer, reply "
    "with the final answer only and no tool call: that reply ends the task."
)

# A fixed conversation ending in an assistant turn: the point after which observations are rendered.
_BASE: tuple[Message, ...] = (
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
)


class ToolListing(StrEnum):
    """How the first prompt lists the tools."""

    FULL = "full"  # JSON schemas in the OpenAI function format, rendered by the chat template's ``tools`` argument
    COMPACT = "compact"  # one ``name(arg, arg=default): first sentence`` line per tool in the system prompt text
    SIGNATURES = "signatures"  # one ``name(arg, arg=default)`` line per tool: the shortest listing, for tiny models


# A sentence ends at . ! ? followed by whitespace, except after the abbreviations "e.g." and "i.e.".
_SENTENCE_END = re.compile(r"(?<![Ee]\.g\.)(?<![Ii]\.e\.)(?<=[.!?])\s")


def compact_tool_line(tool: Mapping[str, Any], describe: bool = True) -> str:
    """``name(arg1, arg2=default): first sentence of description`` for one ``{name, description, input_schema}``.

    Required arguments come bare, optional ones with their JSON default (``=null`` when the schema gives none); the
    sentence is the description's first paragraph cut after its first ``.``/``!``/``?`` followed by whitespace.
    """
    schema = tool.get("input_schema") or {}
    required = set(schema.get("required", ()))
    arguments = [
        name if name in required else f"{name}={json.dumps(spec.get('default'))}"
        for name, spec in schema.get("properties", {}).items()
    ]
    paragraph = " ".join(str(tool.get("description", "")).strip().split("\n\n")[0].split())
    sentence = _SENTENCE_END.split(paragraph, maxsplit=1)[0]
    signature = f"{tool['name']}({', '.join(arguments)})"
    return f"{signature}: {sentence}" if sentence and describe else signature


def compact_system_prompt(
    system_prompt: str,
    tools: Sequence[Mapping[str, Any]],
    listing: ToolListing = ToolListing.COMPACT,
    tool_format: ToolFormatName = ToolFormatName.HERMES_JSON,
) -> str:
    """The system prompt followed by a ``# Tools`` section, one line per tool, and the dialect's call format."""
    lines = "\n".join(compact_tool_line(t, describe=listing is ToolListing.COMPACT) for t in tools)
    return f"{system_prompt}\n\n# Tools\n{lines}\n\nCall format: {call_example(TOOL_FORMATS[tool_format])}"


def tool_definitions(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``{name, description, input_schema}`` listings → the OpenAI function format chat templates render."""
    return [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t.get("description", ""), "parameters": t["input_schema"]},
        }
        for t in tools
    ]


def render(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Message],
    *,
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
    thinking: bool | None = None,
) -> str:
    """The template's text for ``messages`` (``tools`` in the OpenAI function format; ``thinking``: the template's
    ``enable_thinking``, None: the template's default)."""
    switch = {} if thinking is None else {"enable_thinking": thinking}
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages],
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **switch,
    )


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def initial_messages(system_prompt: str, task_prompt: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": task_prompt}]


def prompt_ids(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    listing: ToolListing = ToolListing.FULL,
    tool_format: ToolFormatName = ToolFormatName.HERMES_JSON,
    thinking: bool | None = None,
) -> list[int]:
    """The first prompt: system (with the tool listing in the dialect's call format) + task, then the generation
    prompt (``thinking``: the template's ``enable_thinking``).

    ``full``: the template renders the JSON schemas from its ``tools`` argument. ``compact``: the one-line listing is
    appended to the system message's text (``compact_system_prompt``) and the template gets no tools — a few hundred
    tokens instead of thousands, what a tiny model can attend over.
    """
    if listing is ToolListing.FULL:
        text = render(tokenizer, messages, add_generation_prompt=True, tools=tool_definitions(tools), thinking=thinking)
        return encode(tokenizer, text)
    if not messages or messages[0].get("role") != "system":
        raise ValueError("the compact tool listing goes into the system message; the first message must be one")
    listed = compact_system_prompt(str(messages[0].get("content", "")), tools, listing, tool_format)
    system = {**messages[0], "content": listed}
    return encode(tokenizer, render(tokenizer, [system, *messages[1:]], add_generation_prompt=True, thinking=thinking))


def eos_token_id(tokenizer: PreTrainedTokenizerBase) -> int:
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no eos_token (Qwen-style templates end a turn with <|im_end|>)")
    return int(tokenizer.eos_token_id)


def turn_close_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Ids the template writes after an assistant turn's EOS: ``render(base)`` after its last EOS text."""
    text = render(tokenizer, _BASE)
    eos = tokenizer.eos_token
    if eos is None or eos not in text:
        raise ValueError(f"the chat template does not end an assistant turn with the eos token {eos!r}")
    return encode(tokenizer, text[text.rindex(eos) + len(eos) :])


def delta_ids(
    tokenizer: PreTrainedTokenizerBase, new_messages: Sequence[Message], thinking: bool | None = None
) -> list[int]:
    """Ids of ``new_messages`` (observations) as rendered after an assistant turn, plus the next generation prompt
    (``thinking``: the template's ``enable_thinking``).

    delta = encode(render(base + new, generation prompt)[len(render(base)):]), base a fixed conversation ending in an
    assistant turn. render(base) must be a prefix of the longer render, or the template is not prefix-stable and
    TITO cannot hold.
    """
    if not new_messages:
        raise ValueError("delta_ids needs at least one new message")
    before = render(tokenizer, _BASE)
    after = render(tokenizer, [*_BASE, *new_messages], add_generation_prompt=True, thinking=thinking)
    if not after.startswith(before):
        raise ValueError(
            "the chat template is not prefix-stable: rendering new messages changed the text of earlier turns"
        )
    return encode(tokenizer, after[len(before) :])


def tool_result_message(text: str) -> dict[str, str]:
    return {"role": "tool", "content": text}


def correction_message(
    errors: Sequence[str], tool_format: ToolFormatName = ToolFormatName.HERMES_JSON
) -> dict[str, str]:
    """A user turn telling the model why its tool call could not be parsed and how to write one (in its dialect)."""
    problems = "\n".join(f"- {e}" for e in errors)
    return {
        "role": "user",
        "content": f"Your tool call could not be parsed, so nothing was run:\n{problems}\n"
        f"Write each call as {call_example(TOOL_FORMATS[tool_format])}, or reply without a tool call to give your "
        "final answer.",
    }
