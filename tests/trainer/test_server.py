"""HTTP server: vLLM wire format, chat, control routes and 4xx answers (ASGI in-process and one real socket)."""

import asyncio
import threading
import time

import httpx
import pytest
import torch
import uvicorn

from envs.net import free_port
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.model import TinyModelSpec, bootstrap_policy, build_tiny_model, save_policy
from trainer.tokenizer import render_chat, special_token_ids

CORPUS = [f"file {i}: the memo says {i * 11 % 70} pages about client {i % 13}" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=128)
NAME = "tiny-policy"


@pytest.fixture(scope="module")
def policy():
    return bootstrap_policy(CORPUS, SPEC, vocab_size=400)


@pytest.fixture(scope="module")
def app(policy):
    model, tok = policy
    engine = Engine(model, tok, EngineConfig(max_num_seqs=4))
    yield create_app(engine, NAME)
    engine.close()


def post(app, path, body=None, **kwargs):
    return asyncio.run(_request(app, "POST", path, body, **kwargs))


def get(app, path):
    return asyncio.run(_request(app, "GET", path, None))


async def _request(app, method, path, body, **kwargs):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.request(method, path, json=body, **kwargs)


def test_completions_with_token_ids_and_logprobs(app, policy):
    model, tok = policy
    prompt = tok.encode("file 3: the memo")
    body = {"model": NAME, "prompt": prompt, "max_tokens": 8, "temperature": 1.0, "seed": 4, "logprobs": 2}
    r = post(app, "/v1/completions", {**body, "return_token_ids": True, "ignore_eos": True})
    assert r.status_code == 200, r.text
    data = r.json()
    choice = data["choices"][0]
    assert choice["prompt_token_ids"] == prompt and len(choice["token_ids"]) == 8
    assert choice["finish_reason"] == "length" and choice["text"] == tok.decode(choice["token_ids"])
    with torch.no_grad():
        logits = model(torch.tensor([prompt + choice["token_ids"]])).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(choice["token_ids"])[:, None])[:, 0]
    assert choice["logprobs"]["token_logprobs"] == pytest.approx(expected.tolist(), abs=1e-4)
    assert choice["logprobs"]["tokens"] == [tok.decode([t]) for t in choice["token_ids"]]
    assert all(2 <= len(top) <= 3 for top in choice["logprobs"]["top_logprobs"])  # k best + the sampled token
    counts = {"prompt_tokens": len(prompt), "completion_tokens": 8, "total_tokens": len(prompt) + 8}
    assert data["usage"] == data["usage"] | counts
    plain = post(app, "/v1/completions", {"prompt": prompt, "max_tokens": 8, "seed": 4, "ignore_eos": True}).json()
    assert plain["choices"][0]["logprobs"] is None and "token_ids" not in plain["choices"][0]
    assert plain["choices"][0]["text"] == choice["text"]  # same seed, same sample
    # The same prompt again: all but its last token come from the prefix cache, reported as vLLM does.
    assert plain["usage"]["prompt_tokens_details"] == {"cached_tokens": len(prompt) - 1}


def test_text_prompt_n_samples_and_stop_string(app, policy):
    _, tok = policy
    r = post(app, "/v1/completions", {"prompt": "file 9: the", "max_tokens": 6, "n": 3, "seed": 1, "ignore_eos": True})
    texts = [c["text"] for c in r.json()["choices"]]
    assert len(texts) == 3 and len(set(texts)) > 1  # seeds 1, 2, 3
    again = post(
        app, "/v1/completions", {"prompt": "file 9: the", "max_tokens": 6, "n": 3, "seed": 1, "ignore_eos": True}
    )
    assert [c["text"] for c in again.json()["choices"]] == texts
    full = post(app, "/v1/completions", {"prompt": "file 9", "max_tokens": 12, "seed": 2, "return_token_ids": True})
    ids = full.json()["choices"][0]["token_ids"]
    stop = tok.decode(ids)[4:6]
    cut = post(app, "/v1/completions", {"prompt": "file 9", "max_tokens": 12, "seed": 2, "stop": stop}).json()
    assert cut["choices"][0]["finish_reason"] == "stop" and cut["choices"][0]["stop_reason"] == stop
    assert stop not in cut["choices"][0]["text"] and tok.decode(ids).startswith(cut["choices"][0]["text"])


def test_chat_completions_render_the_template(app, policy):
    _, tok = policy
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "file 2?"}]
    r = post(
        app, "/v1/chat/completions", {"messages": messages, "max_tokens": 5, "return_token_ids": True, "logprobs": True}
    )
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["prompt_token_ids"] == tok.encode(render_chat(tok, messages, add_generation_prompt=True))
    choice = data["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"]) <= 5
    bad_role = post(app, "/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]})
    assert bad_role.status_code == 400 and "unknown chat role" in bad_role.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ({"prompt": [1, "x"]}, 400, "prompt"),
        ({"prompt": [1, 2], "max_tokens": "5"}, 400, "max_tokens"),
        ({"prompt": [1, 2], "temperature": -1}, 400, "temperature"),
        ({"prompt": [1, 2], "n": 0}, 400, "n"),
        ({"max_tokens": 3}, 400, "prompt: Field required"),
        ({"prompt": [1, 5000]}, 400, "outside the vocabulary"),
        ({"prompt": [3] * 120, "max_tokens": 20}, 400, "exceeds the context limit of 128"),
        ({"prompt": [], "max_tokens": 2}, 400, "empty"),
        ({"prompt": [1, 2], "stop_token_ids": [-3]}, 400, "outside the vocabulary"),
        ({"prompt": [1, 2], "model": "gpt-4"}, 404, "`gpt-4` does not exist"),
    ],
)
def test_bad_requests_get_4xx_with_a_reason(app, body, status, reason):
    r = post(app, "/v1/completions", body)
    assert r.status_code == status
    assert reason in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == status


def test_malformed_json_bad_pause_mode_and_bad_weights_path(app, tmp_path):
    r = post(app, "/v1/completions", None, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert post(app, "/pause?mode=sideways").status_code == 400
    r = post(app, "/update_weights", {"path": str(tmp_path / "nowhere")})
    assert r.status_code == 400 and "is not a folder" in r.json()["error"]["message"]
    r = post(app, "/update_weights", {"path": str(tmp_path)})
    assert r.status_code == 400 and "no *.safetensors" in r.json()["error"]["message"]
    assert get(app, "/health").json() == {"status": "ok"}  # still serving


def test_models_and_version(app):
    models = get(app, "/v1/models").json()
    assert [m["id"] for m in models["data"]] == [NAME] and models["data"][0]["max_model_len"] == 128
    assert get(app, "/version").json() == {"version": 0, "paused": False}


def test_real_socket_control_routes_with_a_request_in_flight(policy, tmp_path):
    _, tok = policy
    # A longer context than the shared policy's, so the request stays in flight long after /pause is sent.
    long_spec = SPEC.model_copy(update={"max_position": 1024})
    model = build_tiny_model(long_spec, len(tok), special_token_ids(tok))
    other = build_tiny_model(long_spec.model_copy(update={"seed": 9}), len(tok), special_token_ids(tok))
    save_policy(other, tok, tmp_path / "step-1")
    engine = Engine(model, tok, EngineConfig(max_num_seqs=2))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(engine, NAME), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        with httpx.Client(base_url=base, timeout=30) as client:
            assert client.get("/health").status_code == 200
            body = {
                "prompt": [5, 6, 7],
                "max_tokens": 1000,
                "temperature": 0.0,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            result: dict = {}
            worker = threading.Thread(target=lambda: result.update(client.post("/v1/completions", json=body).json()))
            worker.start()
            while engine.num_running == 0 and worker.is_alive():
                time.sleep(0.001)
            assert client.post("/pause", params={"mode": "keep"}).json() == {"paused": True, "mode": "keep"}
            assert client.get("/version").json() == {"version": 0, "paused": True}
            assert client.post("/update_weights", json={"path": str(tmp_path / "step-1")}).json() == {"version": 1}
            assert client.post("/resume").json() == {"paused": False}
            worker.join(timeout=30)
            choice = result["choices"][0]
            assert len(choice["token_ids"]) == 1000 and choice["weight_version"] == 1
            assert client.post("/v1/completions", json={"prompt": "x" * 1020}).status_code == 400
            assert client.get("/version").json() == {"version": 1, "paused": False}
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.mark.parametrize(("extra", "name"), [([], None), (["--served-model-name", "base"], "base")])
def test_recipe_engine_serve_prints_the_served_name(policy, tmp_path, monkeypatch, capsys, extra, name):
    """The default name is the folder as given (vLLM's default), what `recipe eval run --model` passes."""
    from cli.main import main
    from envs.net import serve_in_thread
    from trainer.engine import server

    model, tok = policy
    folder = save_policy(model, tok, tmp_path / "policy")
    cards = []

    def run_briefly(app, **_: object) -> None:  # instead of serving until interrupted
        with serve_in_thread(app) as url:
            cards.extend(httpx.get(f"{url}/v1/models").json()["data"])

    monkeypatch.setattr(server.uvicorn, "run", run_briefly)
    assert main(["engine", "serve", "--model", f"{folder}/", "--port", "8123", *extra]) == 0
    served = name or str(folder)  # the trailing slash is dropped
    assert [(card["id"], card["max_model_len"]) for card in cards] == [(served, SPEC.max_position)]
    printed = capsys.readouterr().out
    assert f"serving model {served!r} (max_model_len 128) at http://127.0.0.1:8123/v1" in printed
    assert f"recipe eval run --model {served}" in printed
