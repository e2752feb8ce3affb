"""The compact tool listing: one hand-checkable line per tool in the system prompt, no JSON schema."""

from envs.harness.agent import HarnessConfig
from envs.harness.chat import ToolListing, compact_tool_line, encode, prompt_ids, render

TOOLS = [
    {
        "name": "sheets_read_cell",
        "description": "Read the computed value of one cell.\n\nArgs:\n    path: file.",
        "input_schema": {"properties": {"path": {}, "cell": {}}, "required": ["path", "cell"]},
    },
    {
        "name": "filesystem_list_files",
        "description": "List the files, e.g. the reports. Then more.",
        "input_schema": {"properties": {"path": {"default": "."}, "recursive": {"default": True}, "limit": {}}},
    },
]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is in C5?"}]


def test_compact_line_has_signature_and_first_sentence():
    assert compact_tool_line(TOOLS[0]) == "sheets_read_cell(path, cell): Read the computed value of one cell."
    assert (
        compact_tool_line(TOOLS[1])
        == 'filesystem_list_files(path=".", recursive=true, limit=null): List the files, e.g. the reports.'
    )
    assert compact_tool_line({"name": "ping", "input_schema": {}}) == "ping()"


def test_compact_prompt_lists_tools_in_the_system_text(tokenizer):
    ids = prompt_ids(tokenizer, MESSAGES, TOOLS, ToolListing.COMPACT)
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\nsheets_read_cell(path, cell): Read the")
    assert '"input_schema"' not in text and '"parameters"' not in text and "<tools>" not in text
    assert text.endswith("<|im_start|>user\nWhat is in C5?<|im_end|>\n<|im_start|>assistant\n")
    full = prompt_ids(tokenizer, MESSAGES, TOOLS)
    assert full == encode(tokenizer, render(tokenizer, MESSAGES, add_generation_prompt=True, tools=[
        {"type": "function", "function": {"name": t["name"], "description": t["description"],
                                          "parameters": t["input_schema"]}} for t in TOOLS]))  # fmt: skip


def test_harness_default_stays_full():
    assert HarnessConfig().tool_listing is ToolListing.FULL
    assert HarnessConfig(tool_listing="compact").tool_listing is ToolListing.COMPACT


def test_signatures_listing_keeps_only_names_and_arguments():
    assert compact_tool_line(TOOLS[0], describe=False) == "sheets_read_cell(path, cell)"
