"""A SkyRL job on the run's engines (one owner, ``flows.ledger``): SkyRL 0.3's own HTTP client and the vllm-router it
puts over "external servers" reach a gated engine only with the run's token (``trainer.skyrl.engine_auth``).

The engine is launched as the run launches its engines (``VllmServer``: ``trainer.vllm.gate`` in front, on a private
socket), with our server behind the gate (it speaks vLLM's routes; ``make test-vllm`` has vLLM itself behind it).
The client and the router are SkyRL's and vllm-router's own. Runs in ``.venv-cluster`` (``make test-cluster``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip("skyrl", reason="SkyRL's client: .venv-cluster (make install-cluster)")

import aiohttp
import httpx

from tests.gated_engine import gated_engine
from trainer.skyrl.engine_auth import GatedInferenceClient, RemoteInferenceClient

PROMPT = {"json": {"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0.0}}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with gated_engine(tmp_path_factory.mktemp("engine")) as served:
        yield served


def client_of(url: str, servers: list[str]) -> RemoteInferenceClient:
    return RemoteInferenceClient(proxy_url=url, server_urls=servers, data_parallel_size=1, model_name="policy")


async def control_and_generate(client: RemoteInferenceClient) -> tuple[set[int], dict]:
    try:
        statuses = {reply["status"] for reply in (await client.pause()).values()}
        statuses |= {reply["status"] for reply in (await client.resume()).values()}
        return statuses, await client.completion(PROMPT)
    finally:
        await client.teardown()


def test_skyrls_own_client_is_refused_without_the_token(engine: tuple[str, str]) -> None:
    url, _ = engine
    for call in ("pause", "resume", "completion"):
        with pytest.raises(aiohttp.ClientResponseError) as refused:
            asyncio.run(one_call(client_of(url, [url]), call))
        assert refused.value.status == 401, call


async def one_call(client: RemoteInferenceClient, call: str) -> object:
    try:
        return await (client.completion(PROMPT) if call == "completion" else getattr(client, call)())
    finally:
        await client.teardown()


def test_the_gated_client_pauses_resumes_and_generates(engine: tuple[str, str]) -> None:
    url, token = engine
    statuses, reply = asyncio.run(control_and_generate(GatedInferenceClient.of(client_of(url, [url]), token)))
    assert statuses == {200}
    assert len(reply["choices"]) == 1 and reply["choices"][0]["text"] is not None


def test_skyrls_router_over_the_engines_passes_each_callers_token_on(
    engine: tuple[str, str], tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SkyRL's router over the run's engines, as a job's entry point starts it (no key of its own): the gated client
    generates through it and controls the engines; a caller without the token gets nothing through it."""
    pytest.importorskip("vllm_router", reason="vllm-router: make install-cluster")
    import skyrl.backends.skyrl_train.inference_servers.vllm_router as router_module
    from skyrl.backends.skyrl_train.inference_servers.utils import build_router_args
    from skyrl.train.config.config import InferenceEngineConfig

    # The router's URL is built from the node's address: here the node is this machine's loopback, as on the
    # clusters `recipe cluster up` starts (--node-ip-address 127.0.0.1); the router listens there only.
    monkeypatch.setattr(router_module, "get_node_ip", lambda: "127.0.0.1")
    url, token = engine
    config = InferenceEngineConfig(router_init_kwargs={"host": "127.0.0.1"})
    router = router_module.VLLMRouter(build_router_args(config, server_urls=[url]), log_path=str(tmp_path))
    proxy = router.start()
    try:
        statuses, reply = asyncio.run(control_and_generate(GatedInferenceClient.of(client_of(proxy, [url]), token)))
        assert statuses == {200} and len(reply["choices"]) == 1
        body = PROMPT["json"] | {"model": "policy"}
        assert httpx.post(f"{proxy}/v1/completions", json=body, timeout=30).status_code == 401
        assert httpx.post(f"{proxy}/pause", timeout=30).status_code == 401  # the router's fan-out to every engine
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{proxy}/v1/completions", json=body, headers=bearer, timeout=30).status_code == 200
    finally:
        router.shutdown()
