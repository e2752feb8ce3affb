"""Tool-call and final-answer parsing (pure functions): hand-written turns and their expected parse."""

import pytest

from envs.harness.parsing import ParsedTurn, ToolCall, parse_tool_call, parse_turn, strip_think


def test_single_valid_call():
    text = 'Let me look.\n<tool_call>\n{"name": "sheets_read_cell", "arguments": {"cell": "C5", "n": 2}}\n</tool_call>'
    assert parse_turn(text) == ParsedTurn(calls=(ToolCall("sheets_read_cell", {"cell": "C5", "n": 2}),))


def test_several_calls_in_order_and_default_arguments():
    text = (
        '<tool_call>{"name": "a_x", "arguments": {"k": 1}}</tool_call>\n'
        '<tool_call>{"name": "chat_list_channels"}</tool_call>'
        '<tool_call>{"name": "b_y", "arguments": "{\\"q\\": \\"z\\"}"}</tool_call>'
    )
    assert parse_turn(text).calls == (
        ToolCall("a_x", {"k": 1}),
        ToolCall("chat_list_channels", {}),
        ToolCall("b_y", {"q": "z"}),
    )


def test_malformed_json_is_a_parse_error_and_no_call_runs():
    text = (
        '<tool_call>{"name": "a_x", "arguments": {"k": 1}}</tool_call>'
        '<tool_call>{"name": "b_y", "arguments": {</tool_call>'
    )
    parsed = parse_turn(text)
    assert parsed.calls == () and parsed.final_answer is None
    assert len(parsed.errors) == 1 and "not valid JSON" in parsed.errors[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('{"arguments": {"k": 1}}', 'no "name"'),
        ('{"name": "", "arguments": {}}', 'no "name"'),
        ('{"name": "a_x", "arguments": [1, 2]}', "must be a JSON object, got list"),
        ('{"name": "a_x", "arguments": "not json"}', 'arguments" of a_x is not valid JSON'),
        ("[1, 2]", "must be a JSON object, got list"),
    ],
)
def test_bad_call_bodies_name_what_is_wrong(body, message):
    with pytest.raises(ValueError, match=message):
        parse_tool_call(body)


def test_unclosed_and_unopened_tags():
    assert "never closed" in parse_turn('<tool_call>{"name": "a_x"}').errors[0]
    assert "no matching" in parse_turn('{"name": "a_x"}</tool_call>').errors[0]


def test_final_answer_strips_think_and_whitespace():
    assert parse_turn("<think>sum 2+2</think>\n  The total is 4.\n") == ParsedTurn(final_answer="The total is 4.")
    # the generation prompt opened <think>: only the closing tag is in the sampled text
    assert parse_turn("reasoning here</think>\n\n412.5") == ParsedTurn(final_answer="412.5")
    assert parse_turn("") == ParsedTurn(final_answer="")


def test_a_tool_call_ends_the_reasoning_as_vllm_reads_it_and_unfinished_think_is_an_error():
    """vLLM's qwen3 reasoning parser ends reasoning at ``</think>`` or at the first ``<tool_call>``: a call written
    while thinking is a call (vLLM serves it as one), and the ``</think>`` after it is dropped."""
    text = '<think>maybe <tool_call>{"name": "a_x"}</tool_call></think>'
    assert parse_turn(text) == ParsedTurn(calls=(ToolCall("a_x"),))
    assert parse_turn('<think>open <tool_call>{"name": "a_x"}</tool_call>') == ParsedTurn(calls=(ToolCall("a_x"),))
    assert "inside <think>" in parse_turn("<think>still thinking").errors[0]


def test_strip_think():
    assert strip_think("a<think>x</think>b<think>y</think>c") == "abc"
    assert strip_think("x</think>y") == "y"
