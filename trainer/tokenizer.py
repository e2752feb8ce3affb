"""Build the project's own byte-level BPE tokenizer with a Qwen-style chat template.

No model hub is reachable, so the local profile trains its tokenizer on the task corpus. The special tokens and the
chat template follow Qwen2.5/Qwen3 (`<|im_start|>role\\n...<|im_end|>`, `<tool_call>` blocks in the policy's
dialect — Hermes JSON or Qwen3-Coder XML — tool results as a user turn wrapped in `<tool_response>`), so the harness
code that drives a real Qwen checkpoint drives the tiny model unchanged.

One deliberate difference from Qwen's template: the newline that separates two turns is emitted *before* the next
`<|im_start|>` instead of after each `<|im_end|>`. The rendered text of a whole conversation with a generation prompt
is byte-identical to Qwen's, but every rendered prefix now ends exactly at `<|im_end|>` — the token the engine stops
on. That makes the template prefix-stable for TITO: the prompt of turn N+1 is the tokens of turn N (prompt + sampled
completion, ending in `<|im_end|>`) followed by `chat_delta_ids(...)` of the new messages, with no re-tokenisation.
Each tool result is its own user turn (Qwen merges consecutive tool results into one turn, which would make the
rendering of one message depend on the next and break the prefix property).

    tok = train_tokenizer(texts, vocab_size=4096)
    save_tokenizer(tok, "runs/x/tokenizer")       # AutoTokenizer.from_pretrained("runs/x/tokenizer") loads it
    ids = chat_delta_ids(tok, history, [{"role": "tool", "content": "42"}])
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from envs.files import staged_dir
from envs.harness.tool_formats import TOOL_FORMATS, ToolFormatName

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
# Control tokens are "special" (skipped when decoding with skip_special_tokens); the markup tokens below are added
# tokens that stay in decoded text, as in Qwen's tokenizer, so tool-call parsers can see them.
CONTROL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
MARKUP_TOKENS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

# Qwen-style template; see the module docstring for the separator placement that keeps it prefix-stable. The tool
# listing and an assistant turn's calls come from the dialect (``envs.harness.tool_formats``); ``enable_thinking``
# false closes an empty reasoning block in the generation prompt, as Qwen3's templates do; an assistant message's
# ``reasoning_content`` is rendered in front of it as it was sampled (Qwen3.6's "thinking preservation").
_TEMPLATE = """\
{%- macro sep(first) %}{% if not first %}{{ '\\n' }}{% endif %}{% endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    @TOOLS@
    {{- '<|im_end|>' }}
{%- endif %}
{%- for message in messages %}
    {%- set first = loop.first and not tools %}
    {%- if message.role == 'system' and loop.first and tools %}
    {%- elif message.role in ['system', 'user'] or (message.role == 'assistant' and not message.tool_calls) %}
        {{- sep(first) + '<|im_start|>' + message.role + '\\n' }}
        {%- if message.reasoning_content %}
            {{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}
        {%- endif %}
        {{- (message.content or '') + '<|im_end|>' }}
    {%- elif message.role == 'assistant' %}
        {{- sep(first) + '<|im_start|>assistant' }}
        {%- if message.reasoning_content %}
            {{- '\\n<think>\\n' + message.reasoning_content + '\\n</think>\\n' }}
        {%- endif %}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            @CALL@
        {%- endfor %}
        {{- '<|im_end|>' }}
    {%- elif message.role == 'tool' %}
        {{- sep(first) + '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>' }}
    {%- else %}
        {{- raise_exception('unknown chat role: ' + message.role) }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '\\n<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and not enable_thinking %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
"""


def chat_template(tool_format: ToolFormatName = ToolFormatName.HERMES_JSON) -> str:
    """The project's chat template, with the tool listing and the calls of ``tool_format``."""
    pieces = TOOL_FORMATS[tool_format].template
    return _TEMPLATE.replace("@TOOLS@", pieces.tools).replace("@CALL@", pieces.call)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 4096, tool_format: ToolFormatName = ToolFormatName.HERMES_JSON
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE (GPT-2/Qwen pre-tokenisation, single digits, 256 byte alphabet) on `texts`, with the
    chat template of ``tool_format``.

    Every byte is in the initial alphabet, so any string round-trips: decode(encode(s)) == s. len(tokenizer) is at
    most `vocab_size` (less when the corpus runs out of merges).
    """
    n_reserved = 256 + len(CONTROL_TOKENS) + len(MARKUP_TOKENS)
    if vocab_size < n_reserved:
        raise ValueError(f"vocab_size={vocab_size} is below the {n_reserved} byte + special tokens it must hold")
    backend = Tokenizer(models.BPE())
    # Digits one by one, as Qwen's pre-tokeniser does: numbers then never merge into corpus-specific chunks, so a
    # model copies a value it has never seen digit by digit (with merged digits a tiny model copied only the tail).
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),  # the markup tokens are appended after training
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=chat_template(tool_format),
        model_max_length=1 << 30,
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, directory: str | os.PathLike[str]) -> Path:
    """Write the tokenizer files as the folder `directory`, atomically: saved into a hidden sibling folder and swapped
    in whole (``staged_dir``), so a reader sees the old tokenizer or the new one, never a mix. Whatever else was in
    `directory` is replaced with it."""
    target = Path(directory)
    with staged_dir(target) as tmp:
        tokenizer.save_pretrained(tmp)
    return target


def special_token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    """Ids of the control and markup tokens, keyed by token text."""
    return {t: tokenizer.convert_tokens_to_ids(t) for t in (*CONTROL_TOKENS, *MARKUP_TOKENS)}


def render_chat(
    tokenizer: PreTrainedTokenizerFast,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = False,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """The chat template's text for `messages` (the single place the template is applied); "" for no messages."""
    if not messages:
        return ""
    return tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools else None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
    )


def chat_delta_ids(
    tokenizer: PreTrainedTokenizerFast,
    messages_before: Sequence[Mapping[str, Any]],
    new_messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> list[int]:
    """Token ids of `new_messages` exactly as the template renders them after `messages_before`.

    delta = encode(render(before + new, gen_prompt)[len(render(before)):]). Because every rendered prefix ends at
    `<|im_end|>` (a special token, so BPE never merges across it), encode(render(before)) + delta ==
    encode(render(before + new)) token for token; the function checks that the prefix really is a prefix.
    """
    before = render_chat(tokenizer, messages_before, tools=tools)
    full = render_chat(
        tokenizer, [*messages_before, *new_messages], add_generation_prompt=add_generation_prompt, tools=tools
    )
    if not full.startswith(before):
        raise ValueError("chat template is not prefix-stable for these messages: render(before) is not a prefix")
    return tokenizer.encode(full[len(before) :], add_special_tokens=False)
