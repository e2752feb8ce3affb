import asyncio

import httpx
import pytest

from evals.mcq import BUNDLED_MCQ, McqRow, extract_choice, format_prompt, load_mcq
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.mcq_examples import corpus_texts, mcq_example, mcq_examples, reply_text
from trainer.model import TinyModelSpec, bootstrap_policy

ROW = McqRow(id="q", question="What is 2 + 2?", choices=["3", "4", "5", "22"], answer=1, subject="arithmetic")


def test_the_reply_is_read_back_as_the_right_letter():
    assert reply_text(ROW) == "Answer: B" and extract_choice(reply_text(ROW), 4) == "B"


@pytest.fixture(scope="module")
def policy():
    spec = TinyModelSpec(layers=1, hidden=32, heads=1, kv_heads=1, head_dim=64, intermediate=64, max_position=512)
    return bootstrap_policy(corpus_texts(load_mcq(BUNDLED_MCQ)), spec, vocab_size=400)


def test_an_example_is_laid_out_as_the_engine_serves_the_suite(policy):
    """The prompt tokens are the ones the engine's chat route renders for evals.mcq's request; loss on the reply."""
    model, tok = policy
    example = mcq_example(tok, ROW)
    reply = example.loss_mask.count(1)
    assert example.loss_mask == [0] * (len(example.tokens) - reply) + [1] * reply
    assert example.tokens[-1] == tok.eos_token_id and tok.decode(example.tokens[-reply:-1]) == "Answer: B"
    engine = Engine(model, tok, EngineConfig(max_num_seqs=2))
    try:
        body = {"messages": [{"role": "user", "content": format_prompt(ROW)}], "max_tokens": 2}
        served = asyncio.run(_post(create_app(engine, "m"), "/v1/chat/completions", body | {"return_token_ids": True}))
    finally:
        engine.close()
    assert served["prompt_token_ids"] == example.tokens[:-reply]


def test_each_question_is_taught_per_question_times(policy):
    _, tok = policy
    rows = load_mcq(BUNDLED_MCQ)[:3]
    examples = mcq_examples(tok, rows, per_question=4)
    assert len(examples) == 12 and len({id(e) for e in examples}) == 3  # rendered once per question
    replies = [tok.decode([t for t, m in zip(e.tokens[:-1], e.loss_mask[:-1], strict=True) if m]) for e in examples]
    assert replies[::4] == [reply_text(row) for row in rows]
    assert mcq_examples(tok, rows, per_question=0) == []


async def _post(app, path, body):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post(path, json=body)
    response.raise_for_status()
    return response.json()
