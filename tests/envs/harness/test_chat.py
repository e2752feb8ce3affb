"""Chat rendering: the delta of new observations, tokenised alone, continues the sampled tokens exactly.

Checked with the project's prefix-stable template (separator before <|im_start|>) and with Qwen2.5's own layout
(newline after <|im_end|>, consecutive tool results merged into one user turn).
"""

import json

import pytest

from envs.harness.chat import (
    correction_message,
    delta_ids,
    encode,
    prompt_ids,
    render,
    tool_definitions,
    turn_close_ids,
)

QWEN25_TEMPLATE = """\
{%- if tools %}{{- '<|im_start|>system\\n' + messages[0].content + '\\n\\n# Tools\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and tools %}
{%- elif message.role in ['system', 'user', 'assistant'] %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""

HISTORY = [
    {"role": "system", "content": "You answer questions."},
    {"role": "user", "content": "What was Q1 revenue?"},
]
SAMPLED = '<tool_call>\n{"name": "filesystem_read_file", "arguments": {"path": "notes/q1.txt"}}\n</tool_call>'
NEW = [
    {"role": "tool", "content": "Q1 revenue: 412.5 million"},
    {"role": "tool", "content": "the answer is 7"},
]


@pytest.fixture(params=["project", "qwen25"])
def any_tokenizer(request, tokenizer):
    if request.param == "project":
        return tokenizer
    qwen = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>")
    qwen.chat_template = QWEN25_TEMPLATE
    return qwen


def test_sampled_plus_close_plus_delta_equals_full_render(any_tokenizer):
    tok = any_tokenizer
    prefix = encode(tok, render(tok, HISTORY, add_generation_prompt=True))
    sampled = [*encode(tok, SAMPLED), tok.eos_token_id]  # what the engine returns, ending in EOS
    tokens = prefix + sampled + turn_close_ids(tok) + delta_ids(tok, NEW)
    full = render(tok, [*HISTORY, {"role": "assistant", "content": SAMPLED}, *NEW], add_generation_prompt=True)
    assert tokens == encode(tok, full)
    assert tok.decode(delta_ids(tok, NEW)).endswith("<|im_start|>assistant\n")


def test_turn_close_ids_per_template(any_tokenizer):
    expected = "" if any_tokenizer.chat_template != QWEN25_TEMPLATE else "\n"
    assert any_tokenizer.decode(turn_close_ids(any_tokenizer)) == expected


def test_prompt_lists_tools_through_the_template(tokenizer):
    tools = [{"name": "filesystem_read_file", "description": "Read a file.", "input_schema": {"type": "object"}}]
    text = tokenizer.decode(prompt_ids(tokenizer, HISTORY, tools))
    listed = {
        "type": "function",
        "function": {"name": "filesystem_read_file", "description": "Read a file.", "parameters": {"type": "object"}},
    }
    assert json.dumps(listed) in text and text.endswith("<|im_start|>assistant\n")
    assert tool_definitions(tools) == [listed]


def test_unstable_template_and_empty_delta_are_refused(tokenizer):
    unstable = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer, eos_token="<|im_end|>")
    # renders the message count first: appending a message changes the start of the text
    unstable.chat_template = (
        "{{ messages | length }}{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>{% endfor %}"
    )
    with pytest.raises(ValueError, match="not prefix-stable"):
        delta_ids(unstable, NEW)
    with pytest.raises(ValueError, match="at least one new message"):
        delta_ids(tokenizer, [])


def test_correction_message_names_errors():
    message = correction_message(['the tool call has no "name"'])
    assert message["role"] == "user" and 'has no "name"' in message["content"] and "<tool_call>" in message["content"]
