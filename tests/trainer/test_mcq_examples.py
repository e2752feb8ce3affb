import asyncio
import random

import httpx
import pytest

from evals.mcq import BUNDLED_MCQ, McqRow, extract_choice, format_prompt, load_mcq
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.mcq_examples import corpus_texts, mcq_example, reordered, reordered_rows, reply_text
from trainer.model import TinyModelSpec, bootstrap_policy

ROW = McqRow(id="q", question="What is 2 + 2?", choices=["3", "4", "5", "22"], answer=1, subject="arithmetic")


def test_a_reordered_row_keeps_its_answer_and_never_the_suites_order():
    for seed in range(200):
        row = reordered(ROW, random.Random(seed))
        assert row.choices != ROW.choices and sorted(row.choices) == sorted(ROW.choices)
        assert row.choices[row.answer] == "4" and row.question == ROW.question and row.id == "q"
    two = ROW.model_copy(update={"choices": ["4", "5"], "answer": 0})
    assert reordered(two, random.Random(0)).choices == ["5", "4"]  # the one other order


def test_reordered_rows_are_seeded_per_question_and_copy():
    rows = load_mcq(BUNDLED_MCQ)
    drawn = reordered_rows(rows, per_question=3, seed=0)
    assert len(drawn) == 3 * len(rows) and drawn == reordered_rows(rows, per_question=3, seed=0)
    assert drawn != reordered_rows(rows, per_question=3, seed=1)
    assert [r.id for r in drawn[:3]] == [rows[0].id] * 3 and len({tuple(r.choices) for r in drawn[:3]}) > 1
    assert reordered_rows(rows, per_question=0, seed=0) == []


def test_the_reply_is_read_back_as_the_right_letter():
    assert reply_text(ROW) == "Answer: B" and extract_choice(reply_text(ROW), 4) == "B"


@pytest.fixture(scope="module")
def policy():
    texts = corpus_texts(reordered_rows(load_mcq(BUNDLED_MCQ), per_question=2, seed=0))
    return bootstrap_policy(
        texts,
        TinyModelSpec(layers=1, hidden=32, heads=1, kv_heads=1, head_dim=64, intermediate=64, max_position=512),
        vocab_size=400,
    )


def test_an_example_is_laid_out_as_the_engine_serves_the_suite(policy):
    """The prompt tokens are the ones the engine's chat route renders for evals.mcq's request; loss on the reply."""
    model, tok = policy
    example = mcq_example(tok, ROW)
    reply = example.loss_mask.count(1)
    assert example.loss_mask == [0] * (len(example.tokens) - reply) + [1] * reply
    assert example.tokens[-1] == tok.eos_token_id
    assert tok.decode(example.tokens[-reply:-1]) == "Answer: B"
    engine = Engine(model, tok, EngineConfig(max_num_seqs=2))
    try:
        body = {
            "messages": [{"role": "user", "content": format_prompt(ROW)}],
            "max_tokens": 2,
            "return_token_ids": True,
        }
        served = asyncio.run(_post(create_app(engine, "m"), "/v1/chat/completions", body))
    finally:
        engine.close()
    assert served["prompt_token_ids"] == example.tokens[:-reply]


async def _post(app, path, body):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post(path, json=body)
    response.raise_for_status()
    return response.json()
