"""Examples of a team's own tools for the tiny base: a task's prompt, one of the environment's probe calls, and an
answer copied from what the call returned.

A team's environment (``envs.byo``) brings tools the tiny local base has never seen and tasks without oracles, so
there is no solution to imitate. What the author does declare are probe calls known to succeed on every world
(``probes.calls``). The base is taught to explore with them: for every train task and every probe, the prompt, the
probe's call, and the call's answer copied back (the oracle traces' habit of copying what was read: ``trainer.traces``);
and, for every probe, the same after a first look with the probe before it (two calls, the second's answer copied), so
the base's rollouts have more than one call (the TITO check needs them).
Nothing in an example looks at the task's rubric: whether the copied answer earns reward is the environment's to say,
and choosing the probe that answers a task is what RL then learns. The local profile's stand-in for a base that can
already call tools (Qwen3.5 needs none of this).

Each example is recorded, not rendered: its turns are replayed through ``run_agent`` on a copy of the task's world
with the environment's real servers (one session per world: ``envs.harness.tools.tool_session``), so its tokens are a
rollout's and its observation is what the server returned. An answer longer than a turn is cut to the turn limit.

    observed = observe_probes(tasks, worlds_root)           # before the tokenizer: its corpus needs the texts
    examples = probe_examples(tokenizer, observed, worlds_root, config, per_task=2)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from envs.byo.servers import ExternalTools
from envs.byo.spec import WORLD_PLACEHOLDER, expand, server_set_of
from envs.graders import grade
from envs.harness.agent import AgentSetup, HarnessConfig, run_agent
from envs.harness.chat import encode, eos_token_id
from envs.harness.tools import tool_session
from envs.sandbox.world_copy import fork_world
from envs.scratch import scratch_dir
from envs.types import TaskSpec
from trainer.traces import ANSWER_THOUGHT, ReplayEngine, TokenizedTrace, tool_call_text, turn_text

PROBE_EXAMPLES_VERSION = "probe-examples-v4"
"""Part of the base's cache key when it is taught a team's probes: bump it when these examples change."""
ANSWER_MARGIN_TOKENS = 4
"""Room left in the answer turn for what the harness adds after the sampled text."""


@dataclass(frozen=True)
class ObservedCall:
    tool: str
    args: dict[str, Any]
    observation: str


@dataclass(frozen=True)
class ObservedProbe:
    """A taught trace: ``task``'s prompt, ``calls`` in order, then the last one's observation as the answer."""

    task: TaskSpec
    calls: tuple[ObservedCall, ...]

    @property
    def answer(self) -> str:
        return self.calls[-1].observation


def _sequences(calls: list[ObservedCall]) -> list[tuple[ObservedCall, ...]]:
    """Each call alone, then each after the one before it (the first after the last)."""
    pairs = [(calls[index - 1], call) for index, call in enumerate(calls)] if len(calls) > 1 else []
    return [(call,) for call in calls] + pairs


async def _observe_world(tasks: Sequence[TaskSpec], world_root: Path) -> list[ObservedProbe]:
    servers = server_set_of(world_root)
    if servers is None:
        raise ValueError(f"{world_root} has no MCP servers of its own (mcp_servers.json): it is not a team's world")
    calls = []
    with scratch_dir("probe-examples-") as scratch:
        copy = fork_world(world_root, Path(scratch) / world_root.name)
        async with ExternalTools(servers, copy) as tools:
            for probe in servers.probes.calls:
                if WORLD_PLACEHOLDER in json.dumps(probe.args):
                    continue  # a model cannot know its world copy's path: such a probe is de-risk's, not taught
                tool = probe.offered(servers.servers)
                outcome = await tools.call(tool, expand(probe.args, copy / "filesystem"))
                if outcome.is_error:
                    raise ValueError(f"probe {probe.tool} fails on {world_root.name}: {outcome.text[:300]}")
                calls.append(ObservedCall(tool, dict(probe.args), outcome.text.strip()))
    return [ObservedProbe(task, sequence) for task in tasks for sequence in _sequences(calls)]


def observe_probes(tasks: Sequence[TaskSpec], worlds_root: Path) -> list[ObservedProbe]:
    """The taught traces of ``tasks``: the environment's probe calls made once per world (``_sequences`` of them)."""
    by_world: dict[str, list[TaskSpec]] = {}
    for task in tasks:
        by_world.setdefault(task.world_id, []).append(task)
    return [
        probe
        for world_id, world_tasks in by_world.items()
        for probe in asyncio.run(_observe_world(world_tasks, worlds_root / world_id))
    ]


def _turns(probe: ObservedProbe, answer: str, config: HarnessConfig) -> list[str]:
    turns = [
        turn_text(tool_call_text(call.tool, call.args, config.tool_format), f"Next I call {call.tool}.", config)
        for call in probe.calls
    ]
    return [*turns, turn_text(answer, ANSWER_THOUGHT, config)]


def corpus_texts(observed: Sequence[ObservedProbe], config: HarnessConfig) -> list[str]:
    """What the tokenizer should know: the prompts, the calls and what they returned."""
    return [
        text
        for probe in observed
        for text in (
            probe.task.prompt,
            *(call.observation for call in probe.calls),
            *_turns(probe, probe.answer, config),
        )
    ]


def _cut(tokenizer: PreTrainedTokenizerBase, text: str, budget: int) -> str:
    ids = encode(tokenizer, text)
    return text if len(ids) <= budget else tokenizer.decode(ids[:budget]).strip()


async def _record_world(
    tokenizer: PreTrainedTokenizerBase, observed: Sequence[ObservedProbe], world_root: Path, config: HarnessConfig
) -> list[TokenizedTrace]:
    """The examples of one world's probes, replayed one after another through one session of its servers."""
    eos = eos_token_id(tokenizer)
    thought = len(encode(tokenizer, turn_text("", ANSWER_THOUGHT, config)))
    answer_budget = config.max_tokens_per_turn - ANSWER_MARGIN_TOKENS - thought
    recorded = []
    with scratch_dir("probe-replay-") as scratch:
        copy = fork_world(world_root, Path(scratch) / world_root.name)
        async with tool_session(copy) as tools:
            for probe in observed:
                texts = _turns(probe, _cut(tokenizer, probe.answer, answer_budget), config)
                turns = [[*encode(tokenizer, text), eos] for text in texts]
                called = "+".join(call.tool for call in probe.calls)
                if (longest := max(len(turn) for turn in turns)) > config.max_tokens_per_turn:
                    limit = config.max_tokens_per_turn
                    raise ValueError(f"probe example {called}: a turn of {longest} tokens, past the turn limit {limit}")
                agent = AgentSetup(ReplayEngine(turns), tokenizer, config)
                task = probe.task
                trajectory = await run_agent(
                    task, tools, agent, grade_fn=lambda answer, task=task: grade(task, answer, world_root, copy),
                    group_id=f"probe-{task.task_id}",
                )  # fmt: skip
                if trajectory.error_class is not None:
                    what = f"probe example {task.task_id}/{called}"
                    raise ValueError(f"{what}: {trajectory.stop_reason}: {trajectory.error}")
                recorded.append(TokenizedTrace(list(trajectory.tokens), list(trajectory.loss_mask)))
    return recorded


def probe_examples(
    tokenizer: PreTrainedTokenizerBase,
    observed: Sequence[ObservedProbe],
    worlds_root: Path,
    config: HarnessConfig,
    per_task: int,
) -> list[TokenizedTrace]:
    """Every observed probe's example ``per_task`` times (recorded once, drawn as often); none at ``per_task`` 0."""
    if per_task == 0:
        return []
    by_world: dict[str, list[ObservedProbe]] = {}
    for probe in observed:
        by_world.setdefault(probe.task.world_id, []).append(probe)
    recorded = [
        example
        for world_id, probes in by_world.items()
        for example in asyncio.run(_record_world(tokenizer, probes, worlds_root / world_id, config))
    ]
    return [example for example in recorded for _ in range(per_task)]
