"""A rollout against our real engine server (trainer.engine.server) with a tiny random Qwen3 built here.

The random policy rarely writes a tool call, so this checks the wire format end to end: the token-id prompt is what
the harness rendered, the sampled ids and their logprobs line up with a teacher-forced forward pass of the same model
(the logprob of each sampled token given everything before it), and the same seed gives the same rollout.
"""

import asyncio

import pytest
import torch

from envs.harness.agent import AgentSetup, HarnessConfig, run_agent
from envs.harness.engine_client import CompletionsClient
from envs.net import serve_in_thread
from envs.types import AnswerEquals, Domain, GradeResult, StopReason, TaskSpec
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.model import TinyModelSpec, build_tiny_model
from trainer.tokenizer import special_token_ids

SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=32, intermediate=128, max_position=1024)
TASK = TaskSpec(
    task_id="t-2", world_id="w", domain=Domain.GENERAL, prompt="Say 7.", rubric=[AnswerEquals(expected="7")]
)
CONFIG = HarnessConfig(max_turns=3, max_tokens_per_turn=12, context_budget_tokens=1000, seed=11, agent_timeout_s=30)


class _OneTool:
    async def list_tools(self):
        return [{"name": "notes_read", "description": "Read the notes.", "input_schema": {"type": "object"}}]

    async def call(self, name, args):
        raise AssertionError("the random policy is not expected to call tools in this test")


@pytest.fixture(scope="module")
def served(tokenizer):
    model = build_tiny_model(SPEC, len(tokenizer), special_token_ids(tokenizer))
    engine = Engine(model, tokenizer, EngineConfig(max_num_seqs=2, torch_threads=1))
    with serve_in_thread(create_app(engine, "tiny")) as url:
        yield model, url


def _rollout(url, tokenizer):
    async def go():
        async with CompletionsClient(url, "tiny", timeout_s=30) as engine:
            return await run_agent(
                TASK,
                _OneTool(),
                AgentSetup(engine, tokenizer, CONFIG),
                grade_fn=lambda answer: GradeResult(criteria=[], score=0.0, passed=False),
                group_id="g",
            )

    return asyncio.run(go())


def test_rollout_against_the_local_engine_is_token_exact(served, tokenizer):
    model, url = served
    traj = _rollout(url, tokenizer)
    assert traj.stop_reason in (StopReason.STOP, StopReason.LENGTH) and traj.error_class in (None, "model")
    [span] = traj.turns
    assert span.start == traj.prompt_len and span.end == len(traj.tokens) and traj.weight_versions == [0]
    assert traj.loss_mask == [0] * traj.prompt_len + [1] * (span.end - span.start)
    with torch.no_grad():
        logits = model(torch.tensor([traj.tokens])).logits[0, span.start - 1 : span.end - 1]
    sampled = torch.tensor(traj.tokens[span.start : span.end])
    expected = torch.log_softmax(logits, -1).gather(-1, sampled[:, None])[:, 0]
    assert traj.logprobs[span.start :] == pytest.approx(expected.tolist(), abs=1e-4)
    again = _rollout(url, tokenizer)
    assert again.tokens == traj.tokens  # seeded per (sample, turn): reproducible
