"""The TRL side of ``benchmarks/vs_trl.py`` (``benchmarks/trl_bridge.py``), up to TRL itself (which lives in
``.venv-trl``): the environment's methods are our tools with the answers our harness gives, on a private world copy;
TRL's schema of each is what the tool takes; the reward is our grader's; and the prompt TRL renders is token for token
our harness's."""

import asyncio
import importlib.util
import inspect
from pathlib import Path

import pytest
from transformers.utils import get_json_schema

from envs.apps.base import World, tool_schema
from envs.build import load_tasks
from envs.harness.chat import initial_messages, prompt_ids
from envs.harness.config import HarnessConfig, ToolListing
from envs.harness.tool_formats import ToolFormatName
from envs.harness.tools import LocalToolSession
from envs.types import AnswerEquals

BRIDGE = Path(__file__).parents[2] / "benchmarks" / "trl_bridge.py"
APPS = ["filesystem", "sheets"]


@pytest.fixture(scope="module")
def bridge():
    spec = importlib.util.spec_from_file_location("trl_bridge", BRIDGE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tasks(environment_data):
    return [t for t in load_tasks(environment_data) if any(isinstance(c, AnswerEquals) for c in t.rubric)][:3]


def test_the_environment_serves_our_tools_on_a_private_copy_of_the_tasks_world(bridge, environment_data, tasks):
    worlds = environment_data / "worlds"
    environment = bridge.tool_environment(tasks, worlds, APPS)()
    environment.reset(task_id=tasks[0].task_id)
    pristine = worlds / tasks[0].world_id
    ours = LocalToolSession(World(pristine), apps=APPS)
    listed = asyncio.run(ours.list_tools())
    methods = inspect.getmembers(type(environment), predicate=inspect.isfunction)  # what TRL offers as tools
    offered = sorted(name for name, _ in methods if not name.startswith("_") and name != "reset")
    assert offered == sorted(t["name"] for t in listed)
    assert (
        environment.filesystem_list_files(path=".")
        == asyncio.run(ours.call("filesystem_list_files", {"path": "."})).text
    )
    # an error is the text our harness shows, not an exception
    assert "no file" in environment.sheets_read_cell(path="missing.xlsx", sheet="S", cell="A1")
    environment.filesystem_write_file(path="scratch.txt", content="x")
    assert not (pristine / "filesystem" / "scratch.txt").exists()
    schema = get_json_schema(environment.sheets_read_cell)["function"]["parameters"]
    assert schema["required"] == tool_schema("sheets.read_cell")["required"]
    assert {name: p["type"] for name, p in schema["properties"].items()} == {
        "path": "string",
        "sheet": "string",
        "cell": "string",
    }


def test_the_reward_is_our_graders_score_of_the_final_reply(bridge, environment_data, tasks):
    environment_class = bridge.tool_environment(tasks, environment_data / "worlds", APPS)
    right, wrong, calling = environment_class(), environment_class(), environment_class()
    for environment in (right, wrong, calling):
        environment.reset(task_id=tasks[0].task_id)
    [expected] = [c.expected for c in tasks[0].rubric if isinstance(c, AnswerEquals)]
    completions = [
        [{"role": "assistant", "content": str(expected)}],
        [{"role": "assistant", "content": "no idea"}],
        [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "x"}}]}],
    ]
    rewards = bridge.grade_rewards(completions, [right, wrong, calling])
    assert rewards[0] > rewards[1] and rewards[2] == rewards[1]


@pytest.mark.parametrize("tool_format", [ToolFormatName.QWEN3_XML, ToolFormatName.HERMES_JSON])
def test_trls_first_prompt_is_our_harnesss(bridge, environment_data, tasks, tool_format):
    from trainer.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(["the tools " * 50, tasks[0].prompt], vocab_size=400, tool_format=tool_format)
    config = HarnessConfig(tool_listing=ToolListing.SIGNATURES, tool_format=tool_format)
    worlds = environment_data / "worlds"
    specs = asyncio.run(LocalToolSession(World(worlds / tasks[0].world_id), apps=APPS).list_tools())
    ours = prompt_ids(
        tokenizer, initial_messages(config.system_prompt, tasks[0].prompt), specs, config.tool_listing, tool_format
    )
    environment = bridge.tool_environment(tasks, worlds, APPS)()
    tools = [getattr(environment, t["name"]) for t in specs]
    messages = [
        {"role": "system", "content": bridge.system_prompt(config, APPS)},
        {"role": "user", "content": tasks[0].prompt},
    ]
    assert not bridge.first_prompt_matches(tokenizer, ours, messages, tools)  # TRL's schemas would be listed
    tokenizer.chat_template = bridge.listing_in_system_message(tokenizer.chat_template)
    assert bridge.first_prompt_matches(tokenizer, ours, messages, tools)
