"""Shared fixtures: a tiny Qwen-style tokenizer, a one-file world, and a scripted-policy HTTP engine.

The scripted engine speaks the vLLM ``/v1/completions`` wire format (token-id prompt, ``return_token_ids``,
``logprobs``). The request's ``model`` names a script: a list of replies indexed by the turn, where the turn is read
from the prompt itself (number of ``<|im_start|>assistant`` in it, minus one), so concurrent rollouts need no state.
Reply kinds: text (encoded + EOS, finish "stop"), ``Reply(status=500)``, ``Reply(delay_s=...)``, ``Reply(length=True)``
(no EOS, finish "length"). Sampled logprobs are ``-(position + 1) / 100`` so tests can check them at their spans.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envs.apps import World
from envs.net import serve_in_thread
from trainer.tokenizer import train_tokenizer

CORPUS = [
    f"<tool_call> {{'name': 'filesystem_read_file', 'arguments': {{'path': 'notes/q{i}.txt'}}}} </tool_call> "
    f"revenue was {i * 37 % 900} million in quarter {i % 4}; the answer is {i}"
    for i in range(200)
]


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=600)


@pytest.fixture
def world(tmp_path: Path) -> World:
    (tmp_path / "filesystem" / "notes").mkdir(parents=True)
    (tmp_path / "apps_data").mkdir()
    (tmp_path / "filesystem" / "notes" / "q1.txt").write_text("Q1 revenue: 412.5 million\n")
    (tmp_path / "filesystem" / "notes" / "big.txt").write_text("x" * 5000)
    return World(tmp_path)


@dataclass
class Reply:
    text: str = ""
    status: int = 200
    delay_s: float = 0.0
    length: bool = False


@dataclass
class ScriptedEngine:
    """The server's state: scripts by model name and every request body it got (in arrival order)."""

    tokenizer: object
    url: str = ""
    scripts: dict[str, list[Reply]] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)
    sampled: list[tuple[str, list[int]]] = field(default_factory=list)  # (model, ids) of each successful reply
    in_flight: dict[str, int] = field(default_factory=dict)  # requests being answered now, per model
    peak_in_flight: dict[str, int] = field(default_factory=dict)

    def prompts(self, model: str) -> list[list[int]]:
        return [r["prompt"] for r in self.requests if r["model"] == model]

    def replies(self, model: str) -> list[list[int]]:
        return [ids for name, ids in self.sampled if name == model]


def _turn_of(tokenizer, prompt_ids: list[int]) -> int:
    return tokenizer.decode(prompt_ids, skip_special_tokens=False).count("<|im_start|>assistant") - 1


def _scripted_app(state: ScriptedEngine) -> FastAPI:
    app = FastAPI()
    tok = state.tokenizer

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        state.requests.append(body)
        script = state.scripts[body["model"]]
        reply = script[min(_turn_of(tok, body["prompt"]), len(script) - 1)]
        if reply.delay_s:
            model = body["model"]
            state.in_flight[model] = state.in_flight.get(model, 0) + 1
            state.peak_in_flight[model] = max(state.peak_in_flight.get(model, 0), state.in_flight[model])
            try:
                await asyncio.sleep(reply.delay_s)
            finally:
                state.in_flight[model] -= 1
        if reply.status != 200:
            return JSONResponse({"error": {"message": "scripted failure"}}, reply.status)
        ids = tok.encode(reply.text, add_special_tokens=False)
        ids = ids[: body["max_tokens"]] if reply.length else [*ids, tok.eos_token_id][: body["max_tokens"]]
        state.sampled.append((body["model"], ids))
        finish = "stop" if ids and ids[-1] == tok.eos_token_id else "length"
        choice = {
            "index": 0,
            "text": tok.decode(ids, skip_special_tokens=True),
            "token_ids": ids,
            "logprobs": {"token_logprobs": [-(i + 1) / 100 for i in range(len(ids))]},
            "finish_reason": finish,
        }
        return JSONResponse({"choices": [choice]})

    return app


@pytest.fixture(scope="session")
def scripted(tokenizer):
    state = ScriptedEngine(tokenizer)
    with serve_in_thread(_scripted_app(state)) as url:
        state.url = url
        yield state
