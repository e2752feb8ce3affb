"""The agent loop against a scripted-policy HTTP engine (vLLM wire format): each scenario drives one code path.

Every rollout is checked for the TITO invariants (``assert_tito``): equal list lengths, the ids the server sent sit
unchanged at their spans with their logprobs, mask 1 exactly there, and every request's prompt is the trajectory up to
that turn (so each prompt is a prefix of the next).
"""

import asyncio
import itertools
import re
import uuid
from contextlib import asynccontextmanager

import pytest

from envs.graders import grade
from envs.harness.agent import AgentSetup, HarnessConfig, SampleEnv, run_agent, run_group
from envs.harness.engine_client import CompletionsClient, EngineError, EngineRejected, Sampling
from envs.harness.tools import LocalToolSession, ToolOutcome, error_signature
from envs.net import free_port
from envs.types import AnswerNumeric, Domain, ErrorClass, StopReason, TaskSpec, Trajectory

from .conftest import Reply

TASK = TaskSpec(
    task_id="t-1",
    world_id="w-1",
    domain=Domain.GENERAL,
    prompt="What was Q1 revenue?",
    rubric=[AnswerNumeric(expected=412.5)],
)
READ_Q1 = '<tool_call>\n{"name": "filesystem_read_file", "arguments": {"path": "notes/q1.txt"}}\n</tool_call>'
ANSWER = "The answer is 412.5"
CONFIG = HarnessConfig(max_turns=6, max_tokens_per_turn=200, context_budget_tokens=4000, agent_timeout_s=20)


def assert_tito(traj: Trajectory, prompts: list[list[int]], replies: list[list[int]]) -> None:
    assert len(traj.tokens) == len(traj.loss_mask) == len(traj.logprobs)
    assert len(traj.turns) == len(replies)
    if len(prompts) == len(replies) + 1:  # the last request got no completion (timeout, HTTP error)
        assert prompts[-1] == traj.tokens
    else:
        assert len(prompts) == len(replies)
    masked = set()
    for span, prompt, ids in zip(traj.turns, prompts, replies, strict=False):
        assert traj.tokens[span.start : span.end] == ids
        assert traj.tokens[: span.start] == prompt  # the request's prompt is exactly everything before the turn
        assert traj.logprobs[span.start : span.end] == [-(i + 1) / 100 for i in range(len(ids))]
        masked.update(range(span.start, span.end))
    assert [i for i, m in enumerate(traj.loss_mask) if m == 1] == sorted(masked)
    assert all(traj.logprobs[i] == 0.0 for i in range(len(traj.tokens)) if i not in masked)
    assert all(later[: len(earlier)] == earlier for earlier, later in itertools.pairwise(prompts))
    assert traj.prompt_len == traj.turns[0].start


def rollout(scripted, tokenizer, world, replies, config=CONFIG, tools=None):
    model = f"m-{uuid.uuid4().hex[:8]}"
    scripted.scripts[model] = replies

    async def go():
        async with CompletionsClient(scripted.url, model, timeout_s=10) as engine:
            session = tools or LocalToolSession(world, apps=("filesystem",))
            return await run_agent(
                TASK,
                session,
                AgentSetup(engine, tokenizer, config),
                grade_fn=lambda answer: grade(TASK, answer, world.root, world.root),
                group_id="g",
            )

    traj = asyncio.run(go())
    assert_tito(traj, scripted.prompts(model), scripted.replies(model))
    return traj


def text(tokenizer, traj):
    return tokenizer.decode(traj.tokens)


def test_tool_call_then_final_answer(scripted, tokenizer, world):
    traj = rollout(scripted, tokenizer, world, [Reply(READ_Q1), Reply(ANSWER)])
    assert (traj.stop_reason, traj.error_class, traj.final_answer) == (StopReason.STOP, None, ANSWER)
    assert traj.passed and traj.reward == 1.0 and len(traj.turns) == 2
    [record] = traj.tool_calls
    assert (record.turn, record.tool, record.args, record.ok) == (
        0,
        "filesystem_read_file",
        {"path": "notes/q1.txt"},
        True,
    )
    observation = tokenizer.decode(traj.tokens[traj.turns[0].end : traj.turns[1].start])
    assert (
        observation == "\n<|im_start|>user\n<tool_response>\nQ1 revenue: 412.5 million\n\n</tool_response><|im_end|>"
        "\n<|im_start|>assistant\n"
    )
    assert traj.llm_s > 0 and traj.env_s > 0


def test_malformed_call_gets_a_corrective_turn(scripted, tokenizer, world):
    traj = rollout(
        scripted,
        tokenizer,
        world,
        [
            Reply('<tool_call>{"name": "filesystem_read_file", "arguments": {</tool_call>'),
            Reply(READ_Q1),
            Reply(ANSWER),
        ],
    )
    assert traj.stop_reason is StopReason.STOP and traj.passed and len(traj.turns) == 3
    assert len(traj.tool_calls) == 1 and traj.tool_calls[0].turn == 1  # the malformed turn ran nothing
    assert "Your tool call could not be parsed, so nothing was run" in text(tokenizer, traj)


def test_parse_failures_past_the_retry_limit_stop_with_model_error(scripted, tokenizer, world):
    traj = rollout(scripted, tokenizer, world, [Reply('<tool_call>{"arguments": {}}</tool_call>')])
    assert (traj.stop_reason, traj.error_class) == (StopReason.ERROR, ErrorClass.MODEL)
    assert len(traj.turns) == CONFIG.max_parse_retries + 1 and 'no "name"' in traj.error
    assert not traj.passed and traj.criteria  # a model failure is still graded (reward 0 here)


def test_endless_tool_calls_stop_at_max_turns(scripted, tokenizer, world):
    config = CONFIG.model_copy(update={"max_turns": 3})
    traj = rollout(scripted, tokenizer, world, [Reply(READ_Q1)], config)
    assert (traj.stop_reason, traj.error_class) == (StopReason.LENGTH, ErrorClass.MODEL)
    assert len(traj.turns) == 3 and len(traj.tool_calls) == 3
    assert traj.turns[-1].end == len(traj.tokens)  # no observation after the last turn


def test_per_turn_length_and_context_budget(scripted, tokenizer, world):
    long_reply = Reply("revenue " * 100, length=True)
    short = CONFIG.model_copy(update={"max_tokens_per_turn": 5})
    traj = rollout(scripted, tokenizer, world, [long_reply], short)
    assert (traj.stop_reason, len(traj.tokens) - traj.prompt_len) == (StopReason.LENGTH, 5)
    prompt_len = traj.prompt_len
    tight = CONFIG.model_copy(update={"context_budget_tokens": prompt_len + 3})
    traj = rollout(scripted, tokenizer, world, [long_reply], tight)
    assert (traj.stop_reason, traj.error_class, len(traj.tokens)) == (
        StopReason.CONTEXT_LENGTH,
        ErrorClass.MODEL,
        prompt_len + 3,
    )


def test_slow_engine_hits_the_agent_timeout(scripted, tokenizer, world):
    # The first turn (no delay) must finish inside the timeout even on busy cores: 0.3 s did not, under a parallel run.
    config = CONFIG.model_copy(update={"agent_timeout_s": 1.5})
    traj = rollout(scripted, tokenizer, world, [Reply(READ_Q1), Reply(ANSWER, delay_s=4.0)], config)
    assert (traj.stop_reason, traj.error_class) == (StopReason.TIMEOUT, ErrorClass.MODEL)
    assert len(traj.turns) == 1 and len(traj.tool_calls) == 1 and traj.final_answer is None


def test_engine_500_is_retryable_infra_and_not_graded(scripted, tokenizer, world):
    traj = rollout(scripted, tokenizer, world, [Reply(READ_Q1), Reply(status=500)])
    assert (traj.stop_reason, traj.error_class) == (StopReason.ERROR, ErrorClass.RETRYABLE_INFRA)
    assert "HTTP 500" in traj.error and traj.criteria == [] and len(traj.turns) == 1


def test_failing_tool_is_recorded_and_results_are_truncated(scripted, tokenizer, world):
    missing = READ_Q1.replace("q1.txt", "nope.txt")
    big = READ_Q1.replace("q1.txt", "big.txt")
    config = CONFIG.model_copy(update={"tool_result_max_chars": 100})
    traj = rollout(scripted, tokenizer, world, [Reply(missing + big), Reply(ANSWER)], config)
    failed, ok = traj.tool_calls
    assert (failed.ok, failed.error_class, ok.ok) == (False, "ToolError", True) and "nope.txt" in failed.error
    assert "x" * 100 + "\n[… truncated: 4900 of 5000 characters not shown]" in text(tokenizer, traj)


class _BrokenTools:
    async def list_tools(self):
        return [{"name": "filesystem_read_file", "description": "Read.", "input_schema": {"type": "object"}}]

    async def call(self, name, args):
        raise ConnectionError("gateway went away")


def test_tool_transport_error_is_retryable_infra(scripted, tokenizer, world):
    traj = rollout(scripted, tokenizer, world, [Reply(READ_Q1), Reply(ANSWER)], tools=_BrokenTools())
    assert (traj.stop_reason, traj.error_class) == (StopReason.ERROR, ErrorClass.RETRYABLE_INFRA)
    assert traj.tool_calls[0].error_class == "transport" and "gateway went away" in traj.error


def test_error_signature():
    def outcome(text, timed_out=False):
        return ToolOutcome(text, is_error=True, latency_s=0.0, returned_empty=False, timed_out=timed_out)

    assert (
        error_signature(outcome("Traceback ...\nModuleNotFoundError: No module named 'pdfplumber'"))
        == "ModuleNotFoundError"
    )
    assert error_signature(outcome("no such sheet 'Model'")) == "ToolError"
    assert error_signature(outcome("slow", timed_out=True)) == "timeout"


NUDGE = re.compile(r"~(\d+) % of the context window remains; give your final answer soon\.")


def test_context_nudge_when_budget_runs_short(scripted, tokenizer, world):
    plain = rollout(scripted, tokenizer, world, [Reply(READ_Q1), Reply(ANSWER)])
    used = plain.turns[1].start  # tokens in context once the observation is in
    # 1 - used/budget = 0.15 <= 0.2: the notice must be there, with N <= 15 (it adds tokens itself)
    config = CONFIG.model_copy(update={"context_nudge": True, "context_budget_tokens": round(used / 0.85)})
    nudged = rollout(scripted, tokenizer, world, [Reply(READ_Q1), Reply(ANSWER)], config)
    match = NUDGE.search(text(tokenizer, nudged))
    assert match and int(match.group(1)) <= 15 and nudged.stop_reason is StopReason.STOP
    roomy = rollout(
        scripted,
        tokenizer,
        world,
        [Reply(READ_Q1), Reply(ANSWER)],
        config.model_copy(update={"context_budget_tokens": 4000}),
    )
    assert not NUDGE.search(text(tokenizer, plain)) and not NUDGE.search(text(tokenizer, roomy))
    assert (nudged.nudges, plain.nudges, roomy.nudges) == (1, 0, 0)  # the trajectory records each notice it holds


def test_run_group_runs_samples_concurrently_with_own_envs(scripted, tokenizer, world, tmp_path):
    model = "group"
    scripted.scripts[model] = [Reply(READ_Q1), Reply(ANSWER, delay_s=0.3)]

    @asynccontextmanager
    async def env_factory(sample_index):
        if sample_index == 2:
            raise FileNotFoundError(f"world copy {tmp_path / 'missing'} does not exist")
        yield SampleEnv(LocalToolSession(world, apps=("filesystem",)), lambda a: grade(TASK, a, world.root, world.root))

    async def go():
        async with CompletionsClient(scripted.url, model, timeout_s=10) as engine:
            return await run_group(TASK, env_factory, AgentSetup(engine, tokenizer, CONFIG), group_id="g7", n=4)

    trajs = asyncio.run(go())
    assert scripted.peak_in_flight[model] == 3  # the three healthy samples' slow final turns were in flight together
    assert [t.sample_index for t in trajs] == [0, 1, 2, 3] and {t.group_id for t in trajs} == {"g7"}
    assert (trajs[2].stop_reason, trajs[2].error_class) == (StopReason.ERROR, ErrorClass.TASK)
    for t in (trajs[0], trajs[1], trajs[3]):
        assert t.passed and len(t.turns) == 2 and sum(t.loss_mask) == sum(s.end - s.start for s in t.turns)


def test_engine_client_classifies_failures(scripted):
    async def go(url, model):
        async with CompletionsClient(url, model, timeout_s=5) as engine:
            return await engine.complete([1, 2, 3], Sampling(max_tokens=4))

    with pytest.raises(EngineError, match="transport error") as refused:
        asyncio.run(go(f"http://127.0.0.1:{free_port()}", "m"))
    assert refused.value.retryable
    scripted.scripts["bad-request"] = [Reply(status=400)]
    with pytest.raises(EngineRejected, match="HTTP 400") as bad:
        asyncio.run(go(scripted.url, "bad-request"))
    assert not bad.value.retryable
    scripted.scripts["rate-limited"] = [Reply(status=429)]  # "not now", not "not this request"
    with pytest.raises(EngineError, match="HTTP 429") as busy:
        asyncio.run(go(scripted.url, "rate-limited"))
    assert busy.value.retryable and not isinstance(busy.value, EngineRejected)


def test_engine_rejection_propagates_from_agent_and_group(scripted, tokenizer, world):
    """A 4xx is a configuration error: no trajectory, no retry; run_group raises it as itself, not in a group."""
    model = f"m-{uuid.uuid4().hex[:8]}"
    scripted.scripts[model] = [Reply(status=400)]

    @asynccontextmanager
    async def env_factory(sample_index):
        yield SampleEnv(LocalToolSession(world, apps=("filesystem",)), lambda a: grade(TASK, a, world.root, world.root))

    async def go(group: bool):
        async with CompletionsClient(scripted.url, model, timeout_s=10) as engine:
            agent = AgentSetup(engine, tokenizer, CONFIG)
            if group:
                return await run_group(TASK, env_factory, agent, group_id="g", n=3)
            async with env_factory(0) as env:
                return await run_agent(TASK, env.tools, agent, grade_fn=env.grade, group_id="g")

    with pytest.raises(EngineRejected, match="HTTP 400"):
        asyncio.run(go(group=False))
    assert len(scripted.prompts(model)) == 1
    with pytest.raises(EngineRejected, match="HTTP 400"):
        asyncio.run(go(group=True))
    # The first refusal cancels the group: at most one first turn per sample reached the engine, none retried.
    assert 2 <= len(scripted.prompts(model)) <= 4


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="context_nudge_threshold"):
        HarnessConfig(context_nudge_threshold=1.5)
    with pytest.raises(ValueError, match="max_turn"):
        HarnessConfig(max_turn=3)
