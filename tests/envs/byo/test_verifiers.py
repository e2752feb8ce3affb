"""A verifiers environment (0.4, ``verifiers.v1``) through rl-recipe: written against verifiers' public API
(examples/environments/verifiers-ledger), loaded by verifiers' own ``load_environment`` in its own venv, its toolset
served to our harness over MCP, its reward function grading our rollouts."""

import asyncio
from pathlib import Path

import pytest

from envs.build import load_manifest, load_tasks
from envs.byo.servers import ExternalTools
from envs.byo.spec import load_environment_file, server_set_of
from envs.byo.verifiers_env import VerifiersError, verifiers_environment_file, verifiers_reward
from envs.graders import grade
from envs.types import Split, VerifiersReward
from tests.envs.byo.environments import example, servers_installed  # noqa: F401


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    return example("verifiers-ledger", tmp_path_factory.mktemp("data"))


def test_its_tasks_become_tasks_and_tasks_sharing_tools_share_a_world(build: Path) -> None:
    tasks = load_tasks(build)
    assert len(tasks) == 12  # six accounts, a balance and an owner question each
    assert [t.task_id for t in tasks if t.split is Split.HELDOUT] == [f"verifiers-ledger-{i}" for i in (3, 7, 11)]
    assert {t.world_id for t in tasks} == {"tools-1"} and load_manifest(build).world_ids == ["tools-1"]
    first = next(t for t in tasks if t.task_id == "verifiers-ledger-0")
    assert first.prompt == "Use the ledger tools, then answer briefly.\n\nWhat is the balance of account ACC-1?"
    [reward] = first.rubric
    assert isinstance(reward, VerifiersReward) and reward.environment == "ledger-tasks" and reward.task == 0


async def _calls(world: Path) -> tuple[list[str], str, str]:
    async with ExternalTools(server_set_of(world), world) as tools:
        names = [tool["name"] for tool in await tools.list_tools()]
        balance = await tools.call("vf_ledger_balance", {"account": "ACC-3"})
        missing = await tools.call("vf_ledger_balance", {"account": "ACC-9"})
    assert not balance.is_error and missing.is_error
    return names, balance.text, missing.text


def test_its_toolset_is_a_world_server_our_harness_calls(build: Path) -> None:
    names, balance, missing = asyncio.run(_calls(build / "worlds" / "tools-1"))
    assert sorted(names) == ["vf_ledger_balance", "vf_ledger_list_accounts"]
    assert balance == "ACC-3 (Hooli): balance 9100 EUR" and "no account 'ACC-9'" in missing


def test_its_reward_function_grades_the_reply(build: Path, tmp_path: Path) -> None:
    task = next(t for t in load_tasks(build) if t.task_id == "verifiers-ledger-0")
    world = build / "worlds" / "tools-1"
    assert grade(task, "The balance is 1250 EUR.", world, world).passed
    assert not grade(task, "The balance is 125 EUR.", world, world).passed
    owner = next(t for t in load_tasks(build) if t.task_id == "verifiers-ledger-5")  # who owns ACC-3
    assert grade(owner, "hooli", world, world).passed


def test_a_scorer_error_names_what_failed(build: Path) -> None:
    [reward] = load_tasks(build)[0].rubric
    with pytest.raises(VerifiersError, match="IndexError"):
        verifiers_reward(reward.model_copy(update={"task": 99}), "Q?", "A")


def test_an_installed_environment_is_one_id_away(tmp_path: Path) -> None:
    spec = load_environment_file(verifiers_environment_file("acme/Ledger-Tasks@0.2", tmp_path))
    assert spec.name == "ledger-tasks" and spec.verifiers.id == "acme/Ledger-Tasks@0.2" and not spec.servers
