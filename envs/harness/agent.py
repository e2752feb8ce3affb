"""The agent loop: one rollout of a task, token in / token out, and a group of rollouts run concurrently.

One rollout (RECIPE "TITO"): the first prompt is the chat template's render of system + task (tools listed by the
template); each turn posts *all tokens so far* as the prompt to ``/v1/completions``, appends the sampled ids
(mask 1, engine logprobs), parses them (``parsing.parse_turn``), runs the tool calls one after the other, and appends
the observation tokens (mask 0, logprob 0) as a delta of the template (``chat.delta_ids``). History is never
re-rendered, and the code checks that each request's prompt starts with the previous request's prompt + completion.
What drives it besides the task and its tools (engine, tokenizer, ``HarnessConfig``, harness name) is one
``AgentSetup``.

Stop reasons and blame (``Trajectory.stop_reason`` / ``error_class``):

==============================  ==============  =================  ==============================================
what happened                   stop_reason     error_class        note
==============================  ==============  =================  ==============================================
a turn without tool calls       stop            —                  the text (reasoning stripped) is the answer
max_tokens_per_turn hit         length          model
max_turns used up               length          model              the last turn's tools ran (world effects count)
next turn / observation         context_length  model              the task prompt alone: task
would not fit the budget
agent_timeout_s elapsed         timeout         model
> max_parse_retries unparsable  error           model              consecutive turns; each gets a corrective turn
turns in a row
engine / tool transport error   error           retryable_infra    not graded: re-run it, do not train on it
grading raised                  error           task
==============================  ==============  =================  ==============================================

An engine that refuses the request (HTTP 4xx, a reply off the wire format: ``EngineRejected``) yields no trajectory:
every rollout would fail alike (wrong model name, context longer than the server's), so ``run_agent`` and
``run_group`` raise it and the caller stops with the engine's reply instead of recording failures and retrying them.

A tool that answers with an error (bad path, ``ModuleNotFoundError``, its own timeout) is no failure of the rollout:
the model reads the message, and the ``ToolCallRecord`` says ``ok=False`` with the error's class.

Context nudge (RECIPE): when, after an observation, at most ``context_nudge_threshold`` of the context budget would
be left, a notice "~N % of the context window remains … give your final answer soon" is appended to that
observation (training-time harness change; evals run without it); ``Trajectory.nudges`` counts the notices the
rollout's context holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace

from transformers import PreTrainedTokenizerBase

from envs.harness.chat import (
    correction_message,
    delta_ids,
    eos_token_id,
    initial_messages,
    prompt_ids,
    tool_result_message,
    turn_close_ids,
)
from envs.harness.config import HarnessConfig
from envs.harness.engine_client import Completion, CompletionEngine, EngineError, EngineRejected, Sampling
from envs.harness.parsing import MISMATCH, ToolCall, parse_turn
from envs.harness.tools import ToolOutcome, ToolSession, call_record
from envs.types import (
    NO_POLICY_OUTCOME,
    ErrorClass,
    GradeResult,
    StopReason,
    TaskSpec,
    ToolCallRecord,
    Trajectory,
    TurnSpan,
)

GradeFn = Callable[[str | None], GradeResult]
"""Grades a finished rollout from its final answer (None when there is none); the caller binds the world copy."""


class TitoViolation(RuntimeError):
    """A request's prompt is not the previous prompt + completion: a harness bug, never a rollout outcome."""


class _ToolTransportError(Exception):
    """The tool session itself broke (not a tool error the model can read)."""


def truncate_tool_result(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters plus a marker saying how much was dropped (recipe: 42k)."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[… truncated: {len(text) - max_chars} of {len(text)} characters not shown]"


def context_nudge_text(percent_left: int) -> str:
    return f"\n\n[System notice] ~{percent_left} % of the context window remains; give your final answer soon."


def request_seed(base: int | None, sample_index: int, turn: int) -> int | None:
    """A distinct, reproducible seed per (sample, turn): ``(base·P + sample)·P + turn mod 2^63``, P = 1 000 003."""
    if base is None:
        return None
    prime = 1_000_003
    return ((base * prime + sample_index) * prime + turn) % (1 << 63)


def _stop(trajectory: Trajectory, reason: StopReason, error_class: ErrorClass | None, error: str | None) -> None:
    trajectory.stop_reason, trajectory.error_class, trajectory.error = reason, error_class, error


def _append(trajectory: Trajectory, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
    """Append ids; sampled ids (with logprobs) get mask 1, template ids mask 0 and logprob 0. Never rewrites."""
    trajectory.tokens.extend(ids)
    trajectory.loss_mask.extend([0 if logprobs is None else 1] * len(ids))
    trajectory.logprobs.extend([0.0] * len(ids) if logprobs is None else logprobs)


async def _call_tool(
    trajectory: Trajectory, tools: ToolSession, call: ToolCall, turn: int, config: HarnessConfig
) -> str:
    """Run one call, record it, return the text the model will read (truncated)."""
    started = time.perf_counter()
    try:
        outcome = await asyncio.wait_for(tools.call(call.name, call.arguments), config.tool_timeout_s)
    except TimeoutError:
        elapsed = time.perf_counter() - started
        text = f"{call.name}: no answer within the {config.tool_timeout_s:g} s tool timeout"
        outcome = ToolOutcome(text, is_error=True, latency_s=elapsed, returned_empty=False, timed_out=True)
    except Exception as error:  # a session that raises is broken (tool errors come back as outcomes)
        message = f"{call.name}: tool transport failed: {type(error).__name__}: {error}"
        trajectory.tool_calls.append(
            ToolCallRecord(
                turn=turn,
                tool=call.name,
                args=call.arguments,
                ok=False,
                error_class="transport",
                error=message,
                latency_s=time.perf_counter() - started,
            )
        )
        trajectory.env_s += time.perf_counter() - started
        raise _ToolTransportError(message) from error
    trajectory.env_s += time.perf_counter() - started
    trajectory.tool_calls.append(call_record(turn, call.name, call.arguments, outcome))
    return truncate_tool_result(outcome.text, config.tool_result_max_chars)


def _observation_ids(
    tokenizer: PreTrainedTokenizerBase,
    observations: list[dict[str, str]],
    closing: list[int],
    used: int,
    config: HarnessConfig,
) -> tuple[list[int], bool]:
    """closing + delta of the observations; with the nudge on, a notice on the last one when context runs short.
    The flag says whether the notice is in."""
    ids = closing + delta_ids(tokenizer, observations, config.thinking)
    if not config.context_nudge:
        return ids, False
    left = 1.0 - (used + len(ids)) / config.context_budget_tokens
    if left > config.context_nudge_threshold:
        return ids, False
    last = {
        **observations[-1],
        "content": observations[-1]["content"] + context_nudge_text(max(0, math.floor(100 * left))),
    }
    return closing + delta_ids(tokenizer, [*observations[:-1], last], config.thinking), True


@dataclass(frozen=True)
class AgentSetup:
    """What drives a rollout besides its task and tools: the engine that samples, the tokenizer that renders the
    chat template, the harness knobs, and the harness name the trajectories are labelled with (``mcp``,
    ``code_only``, ``terminal``). They travel together from every caller down to the turn loop."""

    engine: CompletionEngine
    tokenizer: PreTrainedTokenizerBase
    config: HarnessConfig
    harness: str = "mcp"

    def with_config(self, **update: object) -> AgentSetup:
        """The same setup with some harness knobs changed (a group's seed, greedy sampling)."""
        return replace(self, config=self.config.model_copy(update=update))


def _record_turn(trajectory: Trajectory, turn: int, completion: Completion) -> None:
    """Appends a sampled turn's tokens and logprobs with its span and the weight version that wrote it."""
    start = len(trajectory.tokens)
    _append(trajectory, completion.token_ids, completion.logprobs)
    span = TurnSpan(
        turn=turn,
        start=start,
        end=len(trajectory.tokens),
        finish_reason=completion.finish_reason,
        weight_version=completion.weight_version,
    )
    trajectory.turns.append(span)
    if completion.weight_version is not None:
        trajectory.weight_versions.append(completion.weight_version)


async def _rollout(trajectory: Trajectory, task: TaskSpec, tools: ToolSession, agent: AgentSetup) -> None:
    """The turn loop; fills ``trajectory`` in place so a timeout keeps what was done."""
    engine, tokenizer, config = agent.engine, agent.tokenizer, agent.config
    eos = eos_token_id(tokenizer)
    close = turn_close_ids(tokenizer)
    budget = config.context_budget_tokens
    try:
        specs = await tools.list_tools()
    except Exception as error:
        raise _ToolTransportError(f"list_tools failed: {type(error).__name__}: {error}") from error
    messages = initial_messages(config.system_prompt, task.prompt)
    first = prompt_ids(tokenizer, messages, specs, config.tool_listing, config.tool_format, config.thinking)
    schemas = {spec["name"]: spec.get("input_schema") or {} for spec in specs}
    _append(trajectory, first)
    trajectory.prompt_len = len(first)
    if len(first) >= budget:
        message = f"the task prompt ({len(first)} tokens) fills the context budget of {budget} tokens"
        return _stop(trajectory, StopReason.CONTEXT_LENGTH, ErrorClass.TASK, message)
    previous: list[int] = []  # last request's prompt + its completion: the next prompt must start with it
    parse_failures = 0
    foreign: str | None = None  # the first "written in another dialect" error: a stop names it, later turns aside
    for turn in range(config.max_turns):
        context = list(trajectory.tokens)
        if context[: len(previous)] != previous:
            raise TitoViolation(f"turn {turn}: the prompt does not start with turn {turn - 1}'s prompt + completion")
        max_tokens = min(config.max_tokens_per_turn, budget - len(context))
        seed = request_seed(config.seed, trajectory.sample_index, turn)
        started = time.perf_counter()
        sampling = Sampling(max_tokens, config.temperature, config.top_p, seed, (eos,))
        completion = await engine.complete(context, sampling)
        trajectory.llm_s += time.perf_counter() - started
        if completion.finish_reason == "abort":
            raise EngineError(f"turn {turn}: the engine aborted the request", retryable=True)
        _record_turn(trajectory, turn, completion)
        previous = context + completion.token_ids
        if completion.finish_reason == "length":
            if max_tokens < config.max_tokens_per_turn:
                message = f"turn {turn} ran into the context budget of {budget} tokens"
                return _stop(trajectory, StopReason.CONTEXT_LENGTH, ErrorClass.MODEL, message)
            message = f"turn {turn} hit max_tokens_per_turn={config.max_tokens_per_turn}"
            return _stop(trajectory, StopReason.LENGTH, ErrorClass.MODEL, message)
        text = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        parsed = parse_turn(text, config.tool_format, schemas)
        if parsed.final_answer is not None:
            trajectory.final_answer = parsed.final_answer
            return _stop(trajectory, StopReason.STOP, None, None)
        if parsed.errors:
            parse_failures += 1
            foreign = foreign or next((e for e in parsed.errors if MISMATCH.search(e)), None)
            if parse_failures > config.max_parse_retries:
                message = f"{parse_failures} unparsable tool-call turns in a row; last: {'; '.join(parsed.errors)}"
                if foreign is not None and foreign not in parsed.errors:
                    message += f"; earlier: {foreign}"
                return _stop(trajectory, StopReason.ERROR, ErrorClass.MODEL, message)
            observations = [correction_message(parsed.errors, config.tool_format)]
        else:
            parse_failures = 0
            observations = [
                tool_result_message(await _call_tool(trajectory, tools, call, turn, config)) for call in parsed.calls
            ]
        if turn + 1 == config.max_turns:
            break  # no turn will read these results: keep the token lists ending at the last sampled turn
        # A turn that stopped on a stop token other than EOS still gets the EOS the template closes turns with.
        closing = ([] if completion.token_ids[-1:] == [eos] else [eos]) + close
        ids, nudged = _observation_ids(tokenizer, observations, closing, len(trajectory.tokens), config)
        if len(trajectory.tokens) + len(ids) >= budget:
            message = f"turn {turn}'s observations ({len(ids)} tokens) leave no room in the {budget}-token budget"
            return _stop(trajectory, StopReason.CONTEXT_LENGTH, ErrorClass.MODEL, message)
        _append(trajectory, ids)
        trajectory.nudges += nudged
    _stop(trajectory, StopReason.LENGTH, ErrorClass.MODEL, f"max_turns={config.max_turns} reached without an answer")


async def run_agent(
    task: TaskSpec, tools: ToolSession, agent: AgentSetup, *, grade_fn: GradeFn, group_id: str, sample_index: int = 0
) -> Trajectory:
    """One rollout of ``task``; graded by ``grade_fn`` unless it failed for infra or task reasons (see module doc)."""
    trajectory = Trajectory(task_id=task.task_id, group_id=group_id, sample_index=sample_index, harness=agent.harness)
    deadline = asyncio.timeout(agent.config.agent_timeout_s)
    try:
        async with deadline:
            await _rollout(trajectory, task, tools, agent)
    except TimeoutError:
        if not deadline.expired():
            raise
        message = f"agent timeout of {agent.config.agent_timeout_s:g} s"
        _stop(trajectory, StopReason.TIMEOUT, ErrorClass.MODEL, message)
    except EngineRejected:
        raise  # a configuration error: retrying would fail alike, and it is no outcome of the policy
    except (EngineError, _ToolTransportError) as error:
        _stop(trajectory, StopReason.ERROR, ErrorClass.RETRYABLE_INFRA, str(error))
    if trajectory.error_class in NO_POLICY_OUTCOME:
        return trajectory
    try:
        grade = await asyncio.to_thread(grade_fn, trajectory.final_answer)
    except Exception as error:
        _stop(trajectory, StopReason.ERROR, ErrorClass.TASK, f"grading failed: {type(error).__name__}: {error}")
        return trajectory
    trajectory.reward, trajectory.criteria, trajectory.passed = grade.score, list(grade.criteria), grade.passed
    return trajectory


@dataclass(frozen=True)
class SampleEnv:
    """What one sample of a group runs against: its own tool session and a grader bound to its own world copy."""

    tools: ToolSession
    grade: GradeFn


EnvFactory = Callable[[int], AbstractAsyncContextManager[SampleEnv]]
"""sample_index → an async context that sets up (copies the world, opens the session) and tears down one sample."""

EnvsForTask = Callable[[TaskSpec], EnvFactory]
"""task → the environment factory of its group (the training loops default to ``envs.rollout.local_envs``)."""

# Setup failures that mean the task itself is broken (missing world, bad task data); any other one is infra.
_TASK_SETUP_ERRORS: tuple[type[Exception], ...] = (FileNotFoundError, NotADirectoryError, KeyError, ValueError)


async def run_group(
    task: TaskSpec, env_factory: EnvFactory, agent: AgentSetup, *, group_id: str, n: int
) -> list[Trajectory]:
    """``n`` rollouts of ``task`` run concurrently, each in its own ``SampleEnv``; trajectories in sample order.

    A sample whose environment cannot be set up comes back as an ``error`` trajectory (``task`` for a missing world or
    bad task data, else ``retryable_infra``) instead of failing the group. ``EngineRejected`` cancels the group and is
    raised as itself (not in an ``ExceptionGroup``), so callers catch it by its class.
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")

    async def one(sample_index: int) -> Trajectory:
        async with contextlib.AsyncExitStack() as stack:
            try:
                env = await stack.enter_async_context(env_factory(sample_index))
            except Exception as error:
                blame = ErrorClass.TASK if isinstance(error, _TASK_SETUP_ERRORS) else ErrorClass.RETRYABLE_INFRA
                failed = Trajectory(
                    task_id=task.task_id, group_id=group_id, sample_index=sample_index, harness=agent.harness
                )
                message = f"sample environment setup failed: {type(error).__name__}: {error}"
                _stop(failed, StopReason.ERROR, blame, message)
                return failed
            return await run_agent(
                task, env.tools, agent, grade_fn=env.grade, group_id=group_id, sample_index=sample_index
            )

    try:
        async with asyncio.TaskGroup() as group:
            runs_G = [group.create_task(one(i)) for i in range(n)]
    except* EngineRejected as rejected:
        raise rejected.exceptions[0] from None  # the first refusal says what is wrong; the others repeat it
    return [run.result() for run in runs_G]
