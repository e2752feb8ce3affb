"""Local services under another site's page and a leaky judge: the engine and the trace explorer on loopback refuse
requests a browser sends for another site (a cross-site form POST, a DNS-rebound host name); the engine refuses text
that is not Unicode with a 400, the explorer an offset out of range; a judge key never reaches an error, a log line or
a repr, in any encoding a server may echo it in, nor does a password in the judge's URL."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
from urllib.parse import quote, quote_plus

import httpx
import pytest
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from envs.errors import RecipeError
from envs.judge import JudgeConfig, JudgeError, LlmJudgeClient
from envs.net import serve_in_thread
from tasks.explorer.queries import Explorer
from tasks.explorer.sample import build_sample_run
from tasks.explorer.server import create_app as explorer_app
from tasks.explorer.tokens import find_tokenizer, load_decoder
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import CONTROL_TOKEN_ENV, create_app
from trainer.model import TinyModelSpec, bootstrap_policy
from trainer.vllm.remote import EngineKind, RemoteEngines, RemoteFleet

CORPUS = [f"file {i}: the memo says {i * 11 % 70} pages about client {i % 13}" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=128)
EVIL = "http://evil.example"
FORM = {"content-type": "application/x-www-form-urlencoded"}


@pytest.fixture(scope="module")
def engine():
    model, tokenizer = bootstrap_policy(CORPUS, SPEC, vocab_size=400)
    with Engine(model, tokenizer, EngineConfig(max_num_seqs=4)) as engine:
        yield engine


@pytest.fixture(scope="module")
def explorer(tmp_path_factory) -> Explorer:
    run = build_sample_run(tmp_path_factory.mktemp("explorer") / "runs")
    return Explorer(run, load_decoder(find_tokenizer(run)))


def _request(app, base_url: str, method: str, path: str, **kwargs) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url) as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


# --- 8: another site's page against a loopback server -----------------------------------------------------------------


def test_a_cross_site_form_post_cannot_pause_a_loopback_engine(engine) -> None:
    app, base = create_app(engine, "p"), "http://127.0.0.1:8000"
    for origin in (EVIL, "null", "http://127.0.0.1:9999"):  # another site, a sandboxed page, another local port
        refused = _request(app, base, "POST", "/pause?mode=abort", headers={"origin": origin, **FORM})
        assert refused.status_code == 403, refused.text
        error = refused.json()["error"]
        assert error["code"] == 403 and "Origin" in error["message"] and "\n" not in error["message"]
        assert not engine.paused
    own = _request(app, base, "POST", "/pause", headers={"origin": base})  # the server's own page may
    assert own.json() == {"paused": True, "mode": "keep"}
    assert _request(app, base, "POST", "/resume").json() == {"paused": False}  # no Origin: a Python client


def test_a_rebound_host_name_cannot_reach_a_loopback_engine(engine, monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(CONTROL_TOKEN_ENV, raising=False)
    with serve_in_thread(create_app(engine, "p")) as url:
        port = url.rpartition(":")[2]
        for path in ("/pause", "/resume"):
            rebound = httpx.post(f"{url}{path}", headers={"host": f"evil.example:{port}"})
            assert rebound.status_code == 403 and "Host" in rebound.json()["error"]["message"]
        assert httpx.get(f"{url}/v1/models", headers={"host": f"evil.example:{port}"}).status_code == 403
        assert not engine.paused
        for name in ("localhost", "127.0.0.1", "[::1]"):
            assert httpx.get(f"{url}/version", headers={"host": f"{name}:{port}"}).status_code == 200

        async def trainer_pause_and_resume() -> None:  # what the trainer sends: no Origin, the address it dialled
            engines = RemoteEngines(urls=(url,), model="p", kind=EngineKind.OURS, staging_dir=tmp_path)
            async with RemoteFleet(engines) as control:
                await control.pause()
                assert engine.paused
                await control.resume()

        asyncio.run(trainer_pause_and_resume())
    assert not engine.paused


def test_the_explorer_refuses_other_sites_and_rebound_hosts(explorer) -> None:
    client = TestClient(explorer_app(explorer), base_url="http://127.0.0.1:8765")
    for headers in ({"host": "evil.example:8765"}, {"origin": EVIL}):
        refused = client.get("/api/run", headers=headers)
        assert refused.status_code == 403 and "\n" not in refused.json()["error"]
    assert client.get("/api/run", headers={"host": "localhost:8765"}).status_code == 200
    assert client.get("/", headers={"origin": "http://127.0.0.1:8765"}).status_code == 200


# --- 500s that are the client's errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", b'{"prompt": "memo \\ud800", "max_tokens": 2}'),
        ("/v1/completions", b'{"prompt": [5, 6], "model": "p\\udfff", "max_tokens": 2}'),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x\\udc00"}], "max_tokens": 2}'),
    ],
)
def test_lone_surrogates_are_400_in_the_engine_error_shape(engine, path: str, body: bytes) -> None:
    headers = {"content-type": "application/json"}
    response = _request(create_app(engine, "p"), "http://test", "POST", path, content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == 400 and error["type"] == "BadRequestError" and "surrogate" in error["message"]


def test_an_explorer_offset_out_of_range_is_a_one_line_400(explorer, caplog) -> None:
    client = TestClient(explorer_app(explorer), raise_server_exceptions=False)
    for offset in ("9223372036854775808", str(2**31 + 1), "-1"):
        response = client.get("/api/trajectories", params={"offset": offset})
        assert response.status_code == 400, response.text
        assert "offset must be" in response.json()["error"] and "\n" not in response.json()["error"]
    assert client.get("/api/trajectories", params={"offset": str(2**31)}).json()["rows"] == []
    assert not [record for record in caplog.records if record.exc_info]  # no traceback in the log


def test_an_explorer_trajectory_id_past_a_bigint_is_a_404_not_a_500(explorer, caplog) -> None:
    """Red-team finding 11 (docs/reliability.md): ``/api/trajectories/<id ≥ 2^63>`` was a 500 (DuckDB's traceback)."""
    client = TestClient(explorer_app(explorer), raise_server_exceptions=False)
    for trajectory_id in (2**63, 2**64 + 5, 10**40):
        response = client.get(f"/api/trajectories/{trajectory_id}")
        assert response.status_code == 404 and response.json()["error"] == f"no trajectory {trajectory_id}"
    weight = client.get("/api/trajectories", params={"weight_version": str(2**63)})
    assert weight.status_code == 400 and "weight_version must be an integer DuckDB can hold" in weight.json()["error"]
    assert not [record for record in caplog.records if record.exc_info]  # no traceback in the log


# --- 9: judge keys and URLs ------------------------------------------------------------------------------------------

KEY = "sk-al/pha+0001="
"""A key with the characters JSON and URL encodings change."""


def _echoes(key: str) -> list[str]:
    """The encodings of ``key`` a server may quote back: raw, JSON-escaped (``\\/`` too), percent-encoded, base64."""
    escaped = json.dumps(key)[1:-1]
    bearer = base64.b64encode(f"Bearer {key}".encode()).decode()
    return [key, escaped.replace("/", "\\/"), quote(key, safe=""), quote(key), quote_plus(key), bearer]


async def _echo_credentials(request: Request) -> Response:
    """A 401 quoting the credential it got, in every encoding of ``_echoes`` (a Basic one decoded first)."""
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if scheme == "Basic":
        credential = base64.b64decode(credential).decode().partition(":")[2]
    return PlainTextResponse(f"invalid key: {' | '.join(_echoes(credential))}", 401)


ECHO = Starlette(routes=[Route("/v1/chat/completions", _echo_credentials, methods=["POST"])])


def _judge_texts(config: JudgeConfig, caplog) -> list[str]:
    """Everything one failing judge call prints: the error, its repr, the log lines, the reprs of client and config."""
    with LlmJudgeClient(config, rng=random.Random(0)) as client:
        with pytest.raises(JudgeError) as info:
            client.judge("task", "criterion", "answer", "")
        texts = [str(info.value), repr(info.value), repr(client)]
    return [*texts, repr(config), str(config), *(record.getMessage() for record in caplog.records)]


def test_judge_keys_are_stripped_at_load(monkeypatch) -> None:
    monkeypatch.setenv("TEST_JUDGE_KEYS", f"{KEY}\n")
    config = JudgeConfig(base_url="http://x/v1", model="m", api_key_env="TEST_JUDGE_KEYS", api_keys=[SecretStr(" k\n")])
    assert [key.get_secret_value() for key in config.resolve_keys()] == ["k", KEY]


@pytest.mark.parametrize("bad", [f"{KEY}\nsk-second", f"{KEY}\x7f", f"sk-é{KEY}", f"{KEY} tail"])
def test_a_key_a_header_cannot_carry_is_refused_naming_the_variable(monkeypatch, bad: str) -> None:
    monkeypatch.setenv("TEST_JUDGE_KEYS", f"sk-fine,{bad}")
    with pytest.raises(RecipeError, match="TEST_JUDGE_KEYS") as info:
        LlmJudgeClient(JudgeConfig(base_url="http://x/v1", model="m", api_key_env="TEST_JUDGE_KEYS"))
    assert "\n" not in str(info.value) and KEY[:5] not in str(info.value) and "sk-fine" not in str(info.value)
    with pytest.raises(RecipeError, match=r"api_keys\[0\]"):
        JudgeConfig(base_url="http://x/v1", model="m", api_keys=[SecretStr(bad)]).resolve_keys()


def test_a_key_echoed_in_any_encoding_is_redacted(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(ECHO) as url:
        # The newline a key file ends with is stripped: the header is legal, and the server's echo is what is left.
        config = JudgeConfig(base_url=f"{url}/v1", model="m", api_keys=[SecretStr(f"{KEY}\n")], max_attempts=1)
        texts = _judge_texts(config, caplog)
    assert "HTTP 401: invalid key: ***" in texts[0]
    for text in texts:
        assert KEY[:5] not in text and not any(echo in text for echo in _echoes(KEY)), text


def test_a_url_userinfo_is_never_printed(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    with serve_in_thread(ECHO) as url:
        config = JudgeConfig(base_url=url.replace("http://", "http://judge:pw-%2Fsecret@") + "/v1", model="m")
        texts = _judge_texts(config.model_copy(update={"max_attempts": 1}), caplog)
    assert "http://***@127.0.0.1:" in repr(config) and "HTTP 401: invalid key: ***" in texts[0]
    for text in texts:
        assert "pw-" not in text and "judge:" not in text, text
