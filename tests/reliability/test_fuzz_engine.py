"""Fuzzing the engine's completion routes with what a hostile or buggy client sends: arbitrary JSON bodies, valid
requests with any field changed (wrong types, huge and negative numbers, lone surrogates, empty and odd stop strings,
out-of-vocabulary ids), chat messages of any shape, bodies that are not JSON. The contract: 200 with choices, or a 4xx
whose JSON body names what was wrong — never a 500. Driven in-process (httpx's ASGI transport) over the tiny model
the other engine tests use."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.model import TinyModelSpec, bootstrap_policy

CORPUS = [f"file {i}: the memo says {i * 11 % 70} pages about client {i % 13}" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=128)
VOCAB = 400
MODEL = "p"
# A served request generates tokens on the CPU: half the profile's examples per test.
REQUESTS = settings(max_examples=max(10, settings().max_examples // 2))


@pytest.fixture(scope="module")
def app():
    model, tokenizer = bootstrap_policy(CORPUS, SPEC, vocab_size=VOCAB)
    with Engine(model, tokenizer, EngineConfig(max_num_seqs=4)) as engine:
        yield create_app(engine, MODEL)


def post(app, path: str, content: bytes, content_type: str = "application/json") -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await client.post(path, content=content, headers={"content-type": content_type}, timeout=60)

    return asyncio.run(go())


def check(response: httpx.Response) -> None:
    """200 with one choice per sample, or a 4xx whose body is the error shape with a message; never a 500."""
    assert response.status_code < 500, response.text
    body = response.json()
    if response.status_code == 200:
        event("served")
        assert body["choices"] and all(choice["finish_reason"] for choice in body["choices"])
        return
    event(f"refused {response.status_code}")
    assert 400 <= response.status_code < 500
    error = body["error"]
    assert error["message"] and error["code"] == response.status_code


def dumps(body: Any) -> bytes:
    """JSON as a client writes it: lone surrogates as escapes, non-finite floats as NaN / Infinity."""
    return json.dumps(body).encode()


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "\udcff", "\u2028", "\x00", "", MODEL, "user", "system", "assistant", "tool"]),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
)
SMALL_INTS = st.integers(min_value=-2, max_value=24)
TOKEN_IDS = st.lists(st.one_of(st.integers(0, VOCAB - 1), st.integers(0, VOCAB - 1), st.integers()), max_size=12)
TEXTS = st.one_of(
    st.text(max_size=40), st.sampled_from(["file 3", "\ud800", "a\udcffb", "\u2028", "\x00", "<|im_end|>"])
)
STOPS = st.one_of(st.none(), TEXTS, st.lists(TEXTS, max_size=3))
SAMPLING = {
    "model": st.one_of(st.none(), st.just(MODEL), st.text(max_size=5)),
    "temperature": st.one_of(st.floats(), st.sampled_from([0.0, 1e-320, 0.7, 1e308])),
    "top_p": st.one_of(st.floats(), st.sampled_from([1.0, 1e-45, 0.5, 0.0])),
    "seed": st.one_of(st.none(), st.integers(), st.sampled_from([2**63 - 1, -(2**63), 2**64])),
    "stop": STOPS,
    "stop_token_ids": st.one_of(st.none(), TOKEN_IDS),
    "n": SMALL_INTS,
    "ignore_eos": st.booleans(),
    "return_token_ids": st.booleans(),
}
COMPLETION_FIELDS = SAMPLING | {
    "prompt": st.one_of(TOKEN_IDS, TEXTS),
    "max_tokens": st.one_of(SMALL_INTS, st.integers()),
    "logprobs": st.one_of(st.none(), SMALL_INTS),
}
MESSAGES = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "tool"]), "content": TEXTS},
            optional={"tool_calls": JSON_VALUES, "name": JSON_SCALARS},
        ),
        st.dictionaries(st.sampled_from(["role", "content", "tool_calls", "x"]), JSON_VALUES, max_size=3),
    ),
    max_size=4,
)
CHAT_FIELDS = SAMPLING | {
    "messages": MESSAGES,
    "tools": st.one_of(st.none(), st.lists(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3), max_size=2)),
    "max_tokens": st.one_of(st.none(), SMALL_INTS, st.integers()),
    "max_completion_tokens": st.one_of(st.none(), SMALL_INTS),
    "logprobs": st.booleans(),
    "top_logprobs": SMALL_INTS,
}


def near_valid(base: dict[str, Any], fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """``base`` with any fields set to a plausible value or any JSON value, some dropped, unknown ones added."""
    values = {name: st.one_of(strategy, strategy, JSON_VALUES) for name, strategy in fields.items()}
    return st.builds(
        lambda changed, dropped, extra: {k: v for k, v in (base | extra | changed).items() if k not in dropped},
        st.fixed_dictionaries({}, optional=values),
        st.sets(st.sampled_from(sorted(base)), max_size=1),
        st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2),
    )


ROUTES = {
    "/v1/completions": near_valid({"prompt": [5, 6, 7], "max_tokens": 2}, COMPLETION_FIELDS),
    "/v1/chat/completions": near_valid(
        {"messages": [{"role": "user", "content": "file 3"}], "max_tokens": 2}, CHAT_FIELDS
    ),
}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_near_valid_body_is_served_or_refused_with_a_reason(app, route: str) -> None:
    @REQUESTS
    @given(ROUTES[route])
    def run(body: dict[str, Any]) -> None:
        check(post(app, route, dumps(body)))

    run()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_any_json_body_is_refused_with_a_reason_or_served(app, route: str) -> None:
    @REQUESTS
    @given(JSON_VALUES)
    def run(body: Any) -> None:
        check(post(app, route, dumps(body)))

    run()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_body_that_is_not_json_is_a_400(app, route: str) -> None:
    @REQUESTS
    @given(st.binary(max_size=64), st.sampled_from(["application/json", "text/plain", ""]))
    def run(content: bytes, content_type: str) -> None:
        response = post(app, route, content, content_type)
        check(response)
        assert response.status_code != 200 or content_type == "application/json"

    run()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_body_that_is_not_utf8_gets_the_error_shape(app, route: str) -> None:
    response = post(app, route, b"\x80")
    assert response.status_code == 400 and response.json()["error"]["code"] == 400
