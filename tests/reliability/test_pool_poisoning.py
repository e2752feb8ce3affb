"""One bad tool call never poisons a pooled sandbox: arguments that are no valid Unicode text are the model's error (a
corrective observation, on every transport), answers that are not UTF-8 still travel, and a pool hands out only
sandboxes whose gateway answers."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from envs.apps import ToolError, World, call_tool
from envs.harness.code_tools import CodeToolSession
from envs.harness.tools import LocalToolSession
from envs.sandbox.base import SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.scratch import kill_processes, processes_of

LONE_SURROGATE = "x\udcff"  # what the JSON string "x\udcff" decodes to


@pytest.fixture
def world(tmp_path: Path) -> Path:
    root = tmp_path / "pristine" / "w1"
    (root / "filesystem").mkdir(parents=True)
    (root / "apps_data" / "mail").mkdir(parents=True)
    (root / "filesystem" / "a.txt").write_text("alpha\n")
    (root / "apps_data" / "mail" / "mailbox.json").write_text(json.dumps({"messages": []}))
    return root


@pytest.mark.parametrize(
    "args",
    [
        {"path": "b.txt", "content": LONE_SURROGATE},
        {"path": LONE_SURROGATE, "content": "ok"},
        {"path": "b.txt", "content": "ok", LONE_SURROGATE: 1},
    ],
)
def test_in_process_an_unencodable_argument_is_a_model_error(world: Path, args: dict) -> None:
    with pytest.raises(ToolError, match="lone surrogate"):
        call_tool(World(world), "filesystem.write_file", args)

    outcome = asyncio.run(LocalToolSession(World(world)).call("filesystem_write_file", args))
    assert outcome.is_error and "lone surrogate" in outcome.text and "\\udcff" in outcome.text
    outcome.text.encode("utf-8")  # the observation itself is valid text
    assert not (world / "filesystem" / "b.txt").exists()


def test_the_code_only_harness_answers_an_unencodable_argument_with_an_observation(world: Path) -> None:
    async def calls() -> list:
        async with CodeToolSession(world) as tools:
            return [
                await tools.call("write", {"path": "b.txt", "content": LONE_SURROGATE}),
                await tools.call("bash", {"command": f"echo {LONE_SURROGATE}"}),
            ]

    for outcome in asyncio.run(calls()):
        assert outcome.is_error and "lone surrogate" in outcome.text


def test_a_pooled_gateway_survives_bad_arguments_and_non_utf8_answers(world: Path, tmp_path: Path) -> None:
    async def scenario() -> list:
        provider = LocalProvider({"w1": world}, SandboxOptions(scratch=tmp_path / "s", apps=("filesystem",)))
        async with SandboxPool(provider, size_per_world=1) as pool:
            async with pool.acquire("w1") as sandbox:
                bad = await sandbox.call("filesystem.write_file", {"path": "b.txt", "content": LONE_SURROGATE})
                # a file name that is not UTF-8 (model code can make one): listing it must not break the answer
                (Path(os.fsdecode(bytes(sandbox.world_root / "filesystem") + b"/bad\xff.txt"))).write_text("x")
                listing = await sandbox.call("filesystem.list_files", {})
                after = await sandbox.call("filesystem.read_file", {"path": "a.txt"})
            return [bad, listing, after, pool.stats.replaced]

    bad, listing, after, replaced = asyncio.run(scenario())
    assert bad.is_error and "lone surrogate" in bad.text
    assert not listing.is_error and "bad\\udcff.txt" in listing.text
    assert not after.is_error and after.text == "alpha\n"
    assert replaced == 0  # the gateway never died


def test_a_pool_replaces_a_sandbox_whose_gateway_died(world: Path, tmp_path: Path) -> None:
    async def scenario() -> tuple:
        provider = LocalProvider({"w1": world}, SandboxOptions(scratch=tmp_path / "s", apps=("filesystem",)))
        async with SandboxPool(provider, size_per_world=1) as pool:
            async with pool.acquire("w1") as first:
                first_root = first.world_root
            kill_processes(processes_of(first_root))  # the idle sandbox's gateway crashes (OOM, a bug, a signal)
            async with pool.acquire("w1") as second:
                outcome = await second.call("filesystem.read_file", {"path": "a.txt"})
                second_root = second.world_root
            async with pool.acquire("w1") as third:  # a rollout crashes the gateway while it holds the sandbox
                kill_processes(processes_of(third.world_root))
            async with pool.acquire("w1") as fourth:
                last = await fourth.call("filesystem.read_file", {"path": "a.txt"})
            return outcome, last, first_root, second_root, pool.stats.replaced

    outcome, last, first_root, second_root, replaced = asyncio.run(scenario())
    assert not outcome.is_error and outcome.text == "alpha\n"
    assert not last.is_error and last.text == "alpha\n"
    assert second_root != first_root and not first_root.exists()  # closed and its copy deleted
    assert replaced == 2
