"""OpenAI/vLLM-compatible HTTP server over the local engine.

Routes (the vLLM wire format, so a real vLLM server is a drop-in):
    POST /v1/completions       prompt as token ids or text; `return_token_ids` adds choices[].token_ids and
                               choices[].prompt_token_ids; `logprobs: k` adds choices[].logprobs.{tokens,
                               token_logprobs, top_logprobs, text_offset} (raw-model logprobs, vLLM's default)
    POST /v1/chat/completions  messages rendered with the tokenizer's chat template
    GET  /v1/models            one card: the served model name (``id``) and its context limit (``max_model_len``)
    GET  /health
    POST /pause?mode=keep|abort, POST /resume, POST /update_weights {"path": dir}, GET /version
Every bad request gets a 4xx JSON body {"error": {"message", "type", "code"}} naming what was wrong; an unexpected
failure is a 500 with the same shape; the process keeps serving. Text prompts are tokenized off the event loop, and
one too long to fit the context is refused before it is read.

The control routes (pause, resume, update_weights) change what every client gets: with a control token
(``--control-token`` or ``$RL_RECIPE_ENGINE_TOKEN``) they need ``Authorization: Bearer <token>``, and a server bound
beyond loopback refuses to start without one.

    python -m trainer.engine.server runs/x/policy/step-0 --port 8000

The served model name — what clients pass as ``model`` — defaults, as in vLLM, to the policy folder's path as given
(``runs/x/policy/step-0``), so an eval's ``--model`` names the folder its tokenizer and ``harness.json`` live in;
``--served-model-name`` sets another. ``serve`` prints it on start.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from transformers import PreTrainedTokenizerBase

from envs.errors import RecipeError
from trainer.engine.engine import Engine, EngineConfig
from trainer.engine.types import (
    CONTROL_TOKEN_ENV,
    Completion,
    EngineRequestError,
    PauseMode,
    SamplingParams,
    Seed,
)
from trainer.model import load_policy
from trainer.tokenizer import render_chat

MAX_N = 16
# NFC normalisation (the Qwen tokenizers') composes at most 4 characters into one, e.g. U+0391 U+0314 U+0342 U+0345.
_NORMALISATION_SHRINK = 4


class _SamplingFields(BaseModel):
    """Fields shared by both generation routes; strict so that wrong JSON types are refused, not coerced."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)

    model: str | None = None
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: Seed | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    ignore_eos: bool = False
    return_token_ids: bool = False

    def sampling_params(self, max_tokens: int | None, logprobs: int) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            max_tokens=max_tokens,
            stop=tuple(stop),
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
            logprobs=logprobs,
        )


class CompletionRequest(_SamplingFields):
    prompt: list[int] | str
    max_tokens: int = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=20)


class ChatCompletionRequest(_SamplingFields):
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0, le=20)


class UpdateWeightsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    path: str


class UnprotectedControlError(RecipeError, ValueError):
    """A server bound beyond loopback without a control token."""


class ApiError(Exception):
    """An error with an HTTP status, rendered as an OpenAI-style error body."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error_body(status: HTTPStatus, message: str) -> JSONResponse:
    error_type = status.phrase.replace(" ", "") + "Error"
    return JSONResponse({"error": {"message": message, "type": error_type, "code": status.value}}, status.value)


def _validation_message(errors: list[Any]) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors)


def create_app(engine: Engine, model_name: str, control_token: str | None = None) -> FastAPI:
    """The HTTP app for `engine` (which must carry a tokenizer); the app closes the engine on shutdown. With
    `control_token`, the control routes need the header ``Authorization: Bearer <control_token>``."""
    if engine.tokenizer is None:
        raise ValueError("the server needs an engine with a tokenizer (to render text and chat)")
    tokenizer: PreTrainedTokenizerBase = engine.tokenizer
    # No token decodes to more characters than the longest vocabulary entry, before normalisation shrinks the text.
    max_prompt_chars = engine.max_model_len * max(map(len, tokenizer.get_vocab())) * _NORMALISATION_SHRINK

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.close()

    app = FastAPI(title="rl-recipe local engine", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_body(HTTPStatus.BAD_REQUEST, _validation_message(list(exc.errors())))

    @app.exception_handler(ValidationError)
    async def _invalid_params(_: Request, exc: ValidationError) -> JSONResponse:
        return _error_body(HTTPStatus.BAD_REQUEST, _validation_message(list(exc.errors())))

    @app.exception_handler(EngineRequestError)
    async def _refused(_: Request, exc: EngineRequestError) -> JSONResponse:
        return _error_body(HTTPStatus.BAD_REQUEST, str(exc))

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error_body(exc.status, str(exc))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        return _error_body(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    async def authorized(request: Request) -> None:
        given = request.headers.get("authorization", "").encode()
        if control_token is not None and not secrets.compare_digest(given, f"Bearer {control_token}".encode()):
            raise ApiError(HTTPStatus.UNAUTHORIZED, "control routes need the header 'Authorization: Bearer <token>'")

    control = [Depends(authorized)]

    async def encode(text: str) -> list[int]:
        """Token ids of a text prompt, tokenized in a worker thread; a text too long for the context is refused."""
        if len(text) > max_prompt_chars:
            raise ApiError(
                HTTPStatus.BAD_REQUEST,
                f"the prompt ({len(text)} characters) cannot fit the context limit of {engine.max_model_len} tokens",
            )
        return await asyncio.to_thread(tokenizer.encode, text, add_special_tokens=False)

    def check_model(name: str | None) -> None:
        if name is not None and name != model_name:
            raise ApiError(
                HTTPStatus.NOT_FOUND, f"the model `{name}` does not exist; this server serves `{model_name}`"
            )

    async def run_n(prompt_ids: list[int], fields: _SamplingFields, params: SamplingParams) -> list[Completion]:
        # n samples of one prompt: distinct seeds seed, seed+1, ... keep a seeded request reproducible.
        seeds = [None if fields.seed is None else fields.seed + i for i in range(fields.n)]
        return list(
            await asyncio.gather(
                *(engine.generate(prompt_ids, params.model_copy(update={"seed": seed})) for seed in seeds)
            )
        )

    def text_of(completion: Completion) -> str:
        text = tokenizer.decode(completion.token_ids_T, skip_special_tokens=True)
        if isinstance(completion.stop_reason, str):  # like vLLM, the stop string is not part of the text
            text = text[: text.find(completion.stop_reason)] if completion.stop_reason in text else text
        return text

    def usage(prompt_ids: list[int], completions: list[Completion]) -> dict[str, Any]:
        generated = sum(len(c.token_ids_T) for c in completions)
        return {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": generated,
            "total_tokens": len(prompt_ids) + generated,
            # As vLLM reports prefix-cache hits (with --enable-prompt-tokens-details).
            "prompt_tokens_details": {"cached_tokens": max((c.cached_tokens for c in completions), default=0)},
        }

    def token_strings(ids: list[int]) -> list[str]:
        return [tokenizer.decode([t]) for t in ids]

    def completion_logprobs(completion: Completion) -> dict[str, Any]:
        tokens = token_strings(completion.token_ids_T)
        offsets = [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
        top = [
            {tokenizer.decode([t]): lp for t, lp in {**alts, token: logprob}.items()}
            for token, logprob, alts in zip(
                completion.token_ids_T, completion.logprobs_T, completion.top_logprobs_T, strict=True
            )
        ]
        return {"tokens": tokens, "token_logprobs": completion.logprobs_T, "top_logprobs": top, "text_offset": offsets}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> dict[str, Any]:
        check_model(req.model)
        prompt_ids = req.prompt if isinstance(req.prompt, list) else await encode(req.prompt)
        params = req.sampling_params(req.max_tokens, req.logprobs or 0)
        results = await run_n(prompt_ids, req, params)
        choices = []
        for i, c in enumerate(results):
            choice: dict[str, Any] = {
                "index": i,
                "text": text_of(c),
                "logprobs": completion_logprobs(c) if req.logprobs is not None else None,
                "finish_reason": c.finish_reason.value,
                "stop_reason": c.stop_reason,
                "weight_version": c.weight_version,
            }
            if req.return_token_ids:
                choice |= {"token_ids": c.token_ids_T, "prompt_token_ids": prompt_ids}
            choices.append(choice)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": usage(prompt_ids, results),
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest) -> dict[str, Any]:
        check_model(req.model)
        try:
            text = await asyncio.to_thread(
                render_chat, tokenizer, req.messages, add_generation_prompt=True, tools=req.tools
            )
        except Exception as exc:  # template errors (unknown role, missing content) are the client's
            raise ApiError(HTTPStatus.BAD_REQUEST, f"messages do not fit the chat template: {exc}") from exc
        prompt_ids = await encode(text)
        params = req.sampling_params(req.max_completion_tokens or req.max_tokens, req.top_logprobs)
        results = await run_n(prompt_ids, req, params)
        choices = []
        for i, c in enumerate(results):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": text_of(c)},
                "logprobs": None,
                "finish_reason": c.finish_reason.value,
                "stop_reason": c.stop_reason,
                "weight_version": c.weight_version,
            }
            if req.logprobs:
                choice["logprobs"] = {
                    "content": [
                        {
                            "token": tok,
                            "logprob": lp,
                            "top_logprobs": [{"token": tokenizer.decode([t]), "logprob": v} for t, v in alts.items()],
                        }
                        for tok, lp, alts in zip(
                            token_strings(c.token_ids_T), c.logprobs_T, c.top_logprobs_T, strict=True
                        )
                    ]
                }
            if req.return_token_ids:
                choice["token_ids"] = c.token_ids_T
            choices.append(choice)
        body: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": usage(prompt_ids, results),
        }
        if req.return_token_ids:
            body["prompt_token_ids"] = prompt_ids
        return body

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "owned_by": "rl-recipe", "max_model_len": engine.max_model_len}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/pause", dependencies=control)
    async def pause(mode: PauseMode = PauseMode.keep) -> dict[str, Any]:
        await asyncio.to_thread(engine.pause, mode)
        return {"paused": True, "mode": mode.value}

    @app.post("/resume", dependencies=control)
    async def resume() -> dict[str, Any]:
        engine.resume()
        return {"paused": False}

    @app.post("/update_weights", dependencies=control)
    async def update_weights(req: UpdateWeightsRequest) -> dict[str, int]:
        if not Path(req.path).is_dir():
            raise ApiError(HTTPStatus.BAD_REQUEST, f"weights path {req.path!r} is not a folder")
        return {"version": await asyncio.to_thread(engine.update_weights, req.path)}

    @app.get("/version")
    async def version() -> dict[str, Any]:
        return {"version": engine.version, "paused": engine.paused}

    return app


def serve(
    model_dir: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: str | None = None,
    config: EngineConfig | None = None,
    control_token: str | None = None,
) -> None:
    """Load the policy in `model_dir` and serve it until interrupted; prints the served model name and context limit.
    The control token defaults to ``$RL_RECIPE_ENGINE_TOKEN``; beyond loopback one is required."""
    control_token = control_token or os.environ.get(CONTROL_TOKEN_ENV) or None
    if control_token is None and not is_loopback(host):
        raise UnprotectedControlError(
            f"refusing to serve on {host}: beyond loopback the control routes (/pause, /resume, /update_weights) "
            f"need a token; set ${CONTROL_TOKEN_ENV} (or pass --control-token), or bind 127.0.0.1"
        )
    model, tokenizer = load_policy(model_dir)
    engine = Engine(model, tokenizer, config)
    name = served_model_name or default_served_name(model_dir)
    app = create_app(engine, name, control_token)
    print(
        f"serving model {name!r} (max_model_len {engine.max_model_len}) at http://{host}:{port}/v1 — "
        f"clients pass model={name!r} (recipe eval run --model {name})",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or ``localhost``) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def default_served_name(model_dir: str | os.PathLike[str]) -> str:
    """vLLM's default served name, the model path as given; normalised, so ``dir/`` and ``dir`` serve one name."""
    return str(Path(model_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a policy folder with the local engine (vLLM wire format).")
    parser.add_argument("model_dir")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name", default=None, help="model name clients pass (default: MODEL_DIR)")
    parser.add_argument("--max-num-seqs", type=int, default=EngineConfig().max_num_seqs)
    parser.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    parser.add_argument(
        "--control-token", default=None, help=f"token the control routes require (default: ${CONTROL_TOKEN_ENV})"
    )
    args = parser.parse_args()
    try:
        serve(
            args.model_dir,
            args.host,
            args.port,
            args.served_model_name,
            EngineConfig(max_num_seqs=args.max_num_seqs, compile=args.compile),
            args.control_token,
        )
    except UnprotectedControlError as error:
        parser.error(str(error))


if __name__ == "__main__":
    main()
