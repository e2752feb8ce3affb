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
beyond loopback refuses to start without one. Every route refuses, with a 403, what a browser sends for another
site's page: an ``Origin`` not the server's own, or (on loopback) a ``Host`` that does not name it — a DNS-rebound
name (``envs.net.LocalSiteGuard``). The trainer's Python client sends neither, so it is served as before.

    python -m trainer.engine.server runs/x/policy/step-0 --port 8000

The served model name — what clients pass as ``model`` — defaults, as in vLLM, to the policy folder's path as given
(``runs/x/policy/step-0``), so an eval's ``--model`` names the folder its tokenizer and ``harness.json`` live in;
``--served-model-name`` sets another. ``serve`` prints it on start.

This module wires the app and runs it; the routes live in ``routes`` (generation, control and status routers), the
state they share in ``served`` (``app.state.served``), and the request and error bodies in ``wire``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from http import HTTPStatus
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from envs.errors import RecipeError
from envs.net import LocalSiteGuard, is_loopback
from trainer.engine import routes
from trainer.engine.engine import Engine, EngineConfig
from trainer.engine.served import ServedModel
from trainer.engine.types import CONTROL_TOKEN_ENV
from trainer.engine.wire import error_body, install_error_handlers
from trainer.model import load_policy


class UnprotectedControlError(RecipeError, ValueError):
    """A server bound beyond loopback without a control token."""


@dataclass(frozen=True)
class ServeOptions:
    """Where ``serve`` listens and what clients see: the address, the served model name (default: the policy folder
    as given) and the control token (default: ``$RL_RECIPE_ENGINE_TOKEN``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    control_token: str | None = None
    uds: str | None = None
    """A Unix socket to listen on instead of ``host:port`` (behind ``trainer.vllm.gate``, as vLLM's ``--uds``)."""


def create_app(engine: Engine, model_name: str, control_token: str | None = None) -> FastAPI:
    """The HTTP app for `engine` (which must carry a tokenizer); the app closes the engine on shutdown. With
    `control_token`, the control routes need the header ``Authorization: Bearer <control_token>``. Requests another
    site's page sends (``envs.net.foreign_site``) get a 403: a browser could otherwise pause a local engine."""
    served = ServedModel.of(engine, model_name, control_token)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.close()

    app = FastAPI(title="rl-recipe local engine", lifespan=lifespan)
    app.state.served = served
    install_error_handlers(app)
    app.add_middleware(LocalSiteGuard, refuse=partial(error_body, HTTPStatus.FORBIDDEN))
    for router in (routes.generation, routes.status, routes.control):
        app.include_router(router)
    return app


def serve(
    model_dir: str | os.PathLike[str], options: ServeOptions | None = None, config: EngineConfig | None = None
) -> None:
    """Load the policy in `model_dir` and serve it until interrupted; prints the served model name and context limit.
    The control token defaults to ``$RL_RECIPE_ENGINE_TOKEN``; beyond loopback one is required."""
    options = options or ServeOptions()
    host, port = options.host, options.port
    control_token = options.control_token or os.environ.get(CONTROL_TOKEN_ENV) or None
    if control_token is None and not is_loopback(host) and options.uds is None:
        raise UnprotectedControlError(
            f"refusing to serve on {host}: beyond loopback the control routes (/pause, /resume, /update_weights) "
            f"need a token; set ${CONTROL_TOKEN_ENV} (or pass --control-token), or bind 127.0.0.1"
        )
    model, tokenizer = load_policy(model_dir)
    engine = Engine(model, tokenizer, config)
    name = options.served_model_name or default_served_name(model_dir)
    app = create_app(engine, name, control_token)
    where = f"unix:{options.uds}" if options.uds else f"http://{host}:{port}/v1"
    print(
        f"serving model {name!r} (max_model_len {engine.max_model_len}) at {where} — "
        f"clients pass model={name!r} (recipe eval run --model {name})",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, uds=options.uds, log_level="warning")


def default_served_name(model_dir: str | os.PathLike[str]) -> str:
    """vLLM's default served name, the model path as given; normalised, so ``dir/`` and ``dir`` serve one name."""
    return str(Path(model_dir))


SERVER_TORCH_THREADS = 1
"""The servers' default torch intra-op threads. A tiny model's ops are too small to split: with 2 threads on 2 cores,
each op waits for the slower one (and for the HTTP thread sharing the cores), and a descheduled core stalls them all.
Medians of 5 interleaved passes, 2 cores (benchmarks/engine_vs_vllm.py mixes, 2026-12-03): single decode 311 vs 146
tok/s (compiled 482 vs 361), 64 mixed requests 2088 vs 1580 (2740 vs 1409), 16 rollouts x 4 turns 1020 vs 1012; on the
faster cores of 2026-12-04, 64 mixed requests compiled, best of 5: 12848-13532 vs 7444-7697 tok/s."""


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve a policy folder with the local engine (vLLM wire format).")
    parser.add_argument("model_dir")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--uds", default=None, help="listen on this Unix socket instead (behind trainer.vllm.gate)")
    parser.add_argument("--served-model-name", default=None, help="model name clients pass (default: MODEL_DIR)")
    parser.add_argument("--max-num-seqs", type=int, default=EngineConfig().max_num_seqs)
    parser.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    parser.add_argument("--torch-threads", type=int, default=SERVER_TORCH_THREADS, help="torch intra-op threads")
    parser.add_argument(
        "--control-token", default=None, help=f"token the control routes require (default: ${CONTROL_TOKEN_ENV})"
    )
    args = parser.parse_args()
    try:
        serve(
            args.model_dir,
            ServeOptions(args.host, args.port, args.served_model_name, args.control_token, args.uds),
            EngineConfig(max_num_seqs=args.max_num_seqs, compile=args.compile, torch_threads=args.torch_threads),
        )
    except UnprotectedControlError as error:
        parser.error(str(error))


if __name__ == "__main__":
    main()
