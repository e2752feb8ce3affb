"""Environment factories: each sample writes in its own pristine world, graded against the pristine one."""

import asyncio
import shutil

import pytest

from envs.harness.agent import AgentSetup, run_group
from envs.harness.engine_client import CompletionsClient
from envs.rollout import local_envs, pooled_envs
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.types import Domain, FileExists, FileUnchanged, TaskSpec

from .conftest import Reply
from .test_agent import CONFIG as SHORT_CONFIG

CONFIG = SHORT_CONFIG.model_copy(update={"context_budget_tokens": 40_000})  # the listing of every app's tools is long

WRITE = (
    '<tool_call>\n{"name": "filesystem_write_file", "arguments": {"path": "out/a.txt", "content": "hi"}}\n</tool_call>'
)
TASK = TaskSpec(
    task_id="w-task",
    world_id="w",
    domain=Domain.GENERAL,
    prompt="Write out/a.txt.",
    rubric=[FileExists(path="out/a.txt"), FileUnchanged(path="notes/q1.txt")],
)


@pytest.mark.parametrize("kind", ["local", "pooled"])
def test_samples_write_in_private_worlds_and_are_graded(scripted, tokenizer, world, tmp_path, kind):
    scripted.scripts[f"writer-{kind}"] = [Reply(WRITE), Reply("done")]
    worlds = tmp_path / "worlds"
    pristine = worlds / "w"
    for part in ("filesystem", "apps_data"):
        shutil.copytree(world.root / part, pristine / part)

    async def go():
        async with CompletionsClient(scripted.url, f"writer-{kind}", timeout_s=10) as engine:
            agent = AgentSetup(engine, tokenizer, CONFIG)
            if kind == "local":
                return await run_group(TASK, local_envs(TASK, worlds), agent, group_id="g", n=3)
            async with SandboxPool(LocalProvider({"w": pristine}), size_per_world=2) as pool:
                return await run_group(TASK, pooled_envs(pool, TASK, worlds), agent, group_id="g", n=3)

    trajectories = asyncio.run(go())
    assert [t.passed for t in trajectories] == [True, True, True], [t.error for t in trajectories]
    assert not (pristine / "filesystem" / "out").exists()  # the pristine world never sees a rollout's writes


def test_local_envs_refuses_a_missing_world(tmp_path):
    with pytest.raises(FileNotFoundError, match="w-task"):
        local_envs(TASK, tmp_path)
