"""The engine under hostile requests: extreme sampling parameters, out-of-range seeds, huge prompts and control
routes reached from beyond loopback. A bad request gets a 400 with a reason and never fails another client's."""

from __future__ import annotations

import asyncio
import math
import threading

import httpx
import pytest
import torch

from trainer.engine import Engine, EngineConfig
from trainer.engine.sampling import sample_batch, top_p_filter
from trainer.engine.server import (
    CONTROL_TOKEN_ENV,
    ServeOptions,
    UnprotectedControlError,
    create_app,
    is_loopback,
    serve,
)
from trainer.engine.types import SamplingParams
from trainer.model import TinyModelSpec, bootstrap_policy
from trainer.vllm.remote import EngineControlError, EngineKind, RemoteEngines, RemoteFleet

CORPUS = [f"file {i}: the memo says {i * 11 % 70} pages about client {i % 13}" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=128)
TINY = 1e-320  # positive, but 0 in float32
PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = bootstrap_policy(CORPUS, SPEC, vocab_size=400)
    with Engine(model, tokenizer, EngineConfig(max_num_seqs=4)) as engine:
        yield engine


def test_tiny_temperature_and_top_p_sample_the_best_token() -> None:
    logits_BV = torch.tensor([[0.0, 3.0, 1.0, 2.0]] * 4)
    out = sample_batch(logits_BV, [TINY, 1e-40, 1.0, 5.0], [1.0, 1.0, TINY, 1e-45], [0.99, 0.5, 0.99, 0.99], 0)
    assert out.tokens_B == [1, 1, 1, 1]
    assert all(math.isfinite(lp) for lp in out.logprobs_B)
    kept = top_p_filter(torch.tensor([[0.2, 0.5, 0.3]]), torch.tensor([[0.0]]))  # the best token is always kept
    assert torch.equal(kept, torch.tensor([[0.0, 1.0, 0.0]]))


def test_a_tiny_temperature_request_does_not_fail_its_batch(engine) -> None:
    normal = SamplingParams(temperature=1.0, seed=3, max_tokens=8, ignore_eos=True)

    async def together():
        hostile = [
            engine.generate(PROMPT, SamplingParams(temperature=TINY, max_tokens=8, ignore_eos=True)),
            engine.generate(PROMPT, SamplingParams(top_p=TINY, max_tokens=8, ignore_eos=True)),
        ]
        return await asyncio.gather(engine.generate(PROMPT, normal), *hostile)

    alone = asyncio.run(engine.generate(PROMPT, normal))
    first, tiny_temperature, tiny_top_p = asyncio.run(together())
    greedy = asyncio.run(engine.generate(PROMPT, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)))
    assert first.token_ids_T == alone.token_ids_T  # the neighbour's sample is untouched
    assert tiny_temperature.token_ids_T == tiny_top_p.token_ids_T == greedy.token_ids_T


def _request(app, method: str, path: str, **kwargs) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"seed": 2**64}, "seed: Input should be less than"),
        ({"seed": -(2**63) - 1}, "seed: Input should be greater than or equal"),
        ({"temperature": "NaN"}, "temperature: Input should be a finite number"),
        ({"top_p": "Infinity"}, "top_p: Input should be a finite number"),
    ],
)
def test_out_of_range_parameters_are_400_with_the_field(engine, body: dict, reason: str) -> None:
    fields = ", ".join(f'"{key}": {value}' for key, value in body.items())
    content = f'{{"prompt": {PROMPT}, "max_tokens": 2, {fields}}}'.encode()
    headers = {"content-type": "application/json"}
    response = _request(create_app(engine, "p"), "POST", "/v1/completions", content=content, headers=headers)
    assert response.status_code == 400 and reason in response.json()["error"]["message"]


def test_extreme_but_valid_parameters_are_served(engine) -> None:
    app = create_app(engine, "p")
    for extra in ({"temperature": TINY}, {"top_p": TINY}, {"seed": 2**63 - 1, "n": 3}, {"seed": -(2**63)}):
        response = _request(app, "POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **extra})
        assert response.status_code == 200, response.text


def test_text_prompts_are_tokenized_off_the_event_loop_and_huge_ones_refused_unread(engine, monkeypatch) -> None:
    app = create_app(engine, "p")
    threads: list[threading.Thread] = []
    encode = engine.tokenizer.encode

    def recording_encode(*args, **kwargs):
        threads.append(threading.current_thread())
        return encode(*args, **kwargs)

    monkeypatch.setattr(engine.tokenizer, "encode", recording_encode)
    chat = {"messages": [{"role": "user", "content": "file 3"}], "max_tokens": 2}
    assert _request(app, "POST", "/v1/completions", json={"prompt": "file 3", "max_tokens": 2}).status_code == 200
    assert _request(app, "POST", "/v1/chat/completions", json=chat).status_code == 200
    assert len(threads) == 2 and threading.main_thread() not in threads  # the test's loop runs on the main thread
    huge = _request(app, "POST", "/v1/completions", json={"prompt": "x" * 1_000_000, "max_tokens": 2})
    assert huge.status_code == 400 and "cannot fit the context limit of 128 tokens" in huge.json()["error"]["message"]
    assert len(threads) == 2  # refused before tokenizing
    assert _request(app, "POST", "/v1/completions", json={"prompt": [1] * 1_000_000}).status_code == 400


def test_control_routes_need_the_token(engine) -> None:
    app = create_app(engine, "p", control_token="s3cret")
    for path in ("/pause", "/resume", "/update_weights"):
        for headers in ({}, {"authorization": "Bearer wrong"}):
            response = _request(app, "POST", path, headers=headers, json={"path": "/nowhere"})
            assert response.status_code == 401 and "Authorization: Bearer" in response.json()["error"]["message"]
    auth = {"authorization": "Bearer s3cret"}
    assert _request(app, "POST", "/pause", headers=auth).json() == {"paused": True, "mode": "keep"}
    assert _request(app, "POST", "/resume", headers=auth).json() == {"paused": False}
    assert _request(app, "POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200


def test_the_trainers_weight_sync_sends_the_token(engine, monkeypatch, tmp_path) -> None:
    app = create_app(engine, "p", control_token="s3cret")

    async def pause_and_resume() -> None:
        transport = httpx.ASGITransport(app=app)
        engines = RemoteEngines(urls=("http://engine",), model="p", kind=EngineKind.OURS, staging_dir=tmp_path)
        async with RemoteFleet(engines, transport=transport) as control:
            await control.pause()
            await control.resume()

    monkeypatch.delenv(CONTROL_TOKEN_ENV, raising=False)
    with pytest.raises(EngineControlError, match="HTTP 401"):
        asyncio.run(pause_and_resume())
    monkeypatch.setenv(CONTROL_TOKEN_ENV, "s3cret")
    asyncio.run(pause_and_resume())
    assert not engine.paused


def test_serving_beyond_loopback_needs_a_token(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(CONTROL_TOKEN_ENV, raising=False)
    with pytest.raises(UnprotectedControlError, match=rf"refusing to serve on 0\.0\.0\.0.*\${CONTROL_TOKEN_ENV}"):
        serve(tmp_path / "no-policy", ServeOptions(host="0.0.0.0"))  # refused before the policy is read
    monkeypatch.setenv(CONTROL_TOKEN_ENV, "s3cret")
    with pytest.raises(OSError):  # past the check: now the missing policy folder is the problem
        serve(tmp_path / "no-policy", ServeOptions(host="0.0.0.0"))
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.2") and not is_loopback("engine.internal")
