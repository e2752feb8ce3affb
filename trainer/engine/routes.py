"""The server's routes, in three routers that read the ``ServedModel`` from ``app.state`` (``served_model``).

* ``generation``: POST /v1/completions, POST /v1/chat/completions (the vLLM wire format)
* ``control``: POST /pause?mode=keep|abort, POST /resume, POST /update_weights — each behind ``authorized``
* ``status``: GET /v1/models, GET /health, GET /version
"""

from __future__ import annotations

import asyncio
import time
import uuid
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends

from trainer.engine.served import ServedModel, authorized, served_model, usage
from trainer.engine.types import PauseMode
from trainer.engine.wire import ApiError, ChatCompletionRequest, CompletionRequest, UpdateWeightsRequest
from trainer.tokenizer import render_chat

Served = Annotated[ServedModel, Depends(served_model)]

generation = APIRouter()
control = APIRouter(dependencies=[Depends(authorized)])
status = APIRouter()


@generation.post("/v1/completions")
async def completions(req: CompletionRequest, served: Served) -> dict[str, Any]:
    served.check_model(req.model)
    prompt_ids = req.prompt if isinstance(req.prompt, list) else await served.encode(req.prompt)
    params = req.sampling_params(req.max_tokens, req.logprobs or 0)
    results = await served.run_n(prompt_ids, req, params)
    choices = []
    for i, c in enumerate(results):
        choice: dict[str, Any] = {
            "index": i,
            "text": served.text_of(c),
            "logprobs": served.completion_logprobs(c) if req.logprobs is not None else None,
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
        "model": served.name,
        "choices": choices,
        "usage": usage(prompt_ids, results),
    }


@generation.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, served: Served) -> dict[str, Any]:
    served.check_model(req.model)
    try:
        text = await asyncio.to_thread(
            render_chat, served.tokenizer, req.messages, add_generation_prompt=True, tools=req.tools
        )
    except Exception as exc:  # template errors (unknown role, missing content) are the client's
        raise ApiError(HTTPStatus.BAD_REQUEST, f"messages do not fit the chat template: {exc}") from exc
    prompt_ids = await served.encode(text)
    params = req.sampling_params(req.max_completion_tokens or req.max_tokens, req.top_logprobs)
    results = await served.run_n(prompt_ids, req, params)
    choices = []
    for i, c in enumerate(results):
        choice: dict[str, Any] = {
            "index": i,
            "message": {"role": "assistant", "content": served.text_of(c)},
            "logprobs": served.chat_logprobs(c) if req.logprobs else None,
            "finish_reason": c.finish_reason.value,
            "stop_reason": c.stop_reason,
            "weight_version": c.weight_version,
        }
        if req.return_token_ids:
            choice["token_ids"] = c.token_ids_T
        choices.append(choice)
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": served.name,
        "choices": choices,
        "usage": usage(prompt_ids, results),
    }
    if req.return_token_ids:
        body["prompt_token_ids"] = prompt_ids
    return body


@control.post("/pause")
async def pause(served: Served, mode: PauseMode = PauseMode.keep) -> dict[str, Any]:
    await asyncio.to_thread(served.engine.pause, mode)
    return {"paused": True, "mode": mode.value}


@control.post("/resume")
async def resume(served: Served) -> dict[str, Any]:
    served.engine.resume()
    return {"paused": False}


@control.post("/update_weights")
async def update_weights(req: UpdateWeightsRequest, served: Served) -> dict[str, int]:
    if not Path(req.path).is_dir():
        raise ApiError(HTTPStatus.BAD_REQUEST, f"weights path {req.path!r} is not a folder")
    return {"version": await asyncio.to_thread(served.engine.update_weights, req.path)}


@status.get("/v1/models")
async def models(served: Served) -> dict[str, Any]:
    card = {"id": served.name, "object": "model", "owned_by": "rl-recipe", "max_model_len": served.engine.max_model_len}
    return {"object": "list", "data": [card]}


@status.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@status.get("/version")
async def version(served: Served) -> dict[str, Any]:
    return {"version": served.engine.version, "paused": served.engine.paused}
