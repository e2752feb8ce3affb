"""The one door of a vLLM engine: ``python -m trainer.vllm.gate --host H --port P --token-file F -- VLLM_ARGV...``.

vLLM's RL routes (``VLLM_SERVER_DEV_MODE=1``: ``/pause``, ``/collective_rpc``, ``/update_weights``, ``/sleep``...)
take no key — ``--api-key`` guards only ``/v1`` — and ``/collective_rpc`` runs a worker method with pickled
arguments: one request, even a cross-site ``text/plain`` POST from a web page, can swap or destroy the policy. So the
engine never listens on TCP itself. The gate starts vLLM as its child on a Unix socket in a private folder
(``--uds``), and is the only listener. It refuses every request a page of another site sends (a foreign ``Origin``:
``envs.net.foreign_origin``), answers the liveness probe (``OPEN_PROBES``) to anyone who calls it by its own address,
and every other route only for requests that carry the run's token (``Authorization: Bearer``) — what a DNS-rebound
page never holds, so those may name another ``Host`` (a proxy in front names itself) — and passes them on, bodies
streamed both ways. Refusals are 401 / 403 with a JSON
``error``. vLLM also gets the token as ``VLLM_API_KEY`` (its own check on ``/v1``, should the socket ever be reached).

The gate lives as long as vLLM: it exits with vLLM's exit code, and a SIGTERM to the pair's process group (what
``trainer.vllm.guard`` sends) stops both. The token comes from a file (``envs.tokens``), never from argv.

    python -m trainer.vllm.gate --host 127.0.0.1 --port 8000 --token-file runs/R/engines/token -- \\
        .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server --model M ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import uvicorn
from starlette.requests import HTTPConnection
from starlette.types import Receive, Scope, Send

from envs.net import foreign_origin, rebound_host
from envs.tokens import bearer_matches, read_token_file

UPSTREAM = "http://engine"
"""The base URL requests to vLLM's socket carry (the host part is ignored over a Unix socket)."""
CONNECT_TIMEOUT_S = 10.0
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "host", "content-length"}
)


OPEN_PROBES = frozenset({("GET", "/health"), ("HEAD", "/health")})
"""Liveness, answered without the token: routers and load balancers probe it without credentials (vllm-router 0.1.17,
which SkyRL puts over a run's engines, does), and it tells only that the engine is up."""


def _json(status: int, message: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"error": {"message": message, "type": "forbidden", "code": status}}).encode()
    return status, [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())], body


class EngineGate:
    """The ASGI app: check, then forward to vLLM's socket (module docstring)."""

    def __init__(self, token: str, uds: str) -> None:
        self.token = token
        self.client = httpx.AsyncClient(
            base_url=UPSTREAM,
            transport=httpx.AsyncHTTPTransport(uds=uds),
            # A completion may take as long as the engine needs; the caller bounds it with its own timeout.
            timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        connection = HTTPConnection(scope)
        reason = foreign_origin(connection)
        if reason is not None:
            return 403, reason
        if (scope["method"], scope["path"]) in OPEN_PROBES:
            reason = rebound_host(connection)
            return None if reason is None else (403, reason)
        if not bearer_matches(connection.headers.get("authorization"), self.token):
            return 401, "refused: this engine needs the run's token (Authorization: Bearer <token>)"
        # A token holder may name another host: a proxy in front (the router SkyRL puts over the engines) sends its
        # own; a rebound page never holds the token.
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":  # websockets and anything else: not an engine route
            return
        refused = self.refusal(scope)
        if refused is not None:
            await self._reply(send, *_json(*refused))
            return
        await self._forward(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body() -> AsyncIterator[bytes]:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                yield message.get("body", b"")
                if not message.get("more_body", False):
                    return

        headers = [(k, v) for k, v in scope["headers"] if k.decode("latin-1").lower() not in HOP_BY_HOP]
        target = scope["raw_path"].decode("latin-1") if scope.get("raw_path") else scope["path"]
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        request = self.client.build_request(scope["method"], target, headers=headers, content=body())
        try:
            upstream = await self.client.send(request, stream=True)
        except httpx.HTTPError as error:
            await self._reply(send, *_json(503, f"the engine behind this gate does not answer: {error}"))
            return
        try:
            out = [(k, v) for k, v in upstream.headers.raw if k.decode("latin-1").lower() not in HOP_BY_HOP]
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": out})
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except httpx.HTTPError:  # the engine died mid-answer: the client sees a cut connection, as it would without us
            pass
        finally:
            await upstream.aclose()

    @staticmethod
    async def _reply(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def run_gate(host: str, port: int, token_file: Path, engine_argv: list[str]) -> int:
    """Start vLLM on a private socket, serve the gate on ``host:port`` until vLLM exits; vLLM's exit code."""
    token = read_token_file(token_file)
    folder = tempfile.mkdtemp(prefix="rr-engine-")  # mode 0700: only this user reaches the socket
    uds = os.path.join(folder, "engine.sock")
    engine = subprocess.Popen([*engine_argv, "--uds", uds], env=os.environ | {"VLLM_API_KEY": token})
    server = uvicorn.Server(uvicorn.Config(EngineGate(token, uds), host=host, port=port, log_level="warning"))

    async def watch() -> None:
        while engine.poll() is None:
            await asyncio.sleep(0.5)
        server.should_exit = True

    async def main() -> None:
        watcher = asyncio.create_task(watch())
        await server.serve()
        watcher.cancel()

    try:
        asyncio.run(main())
    finally:
        if engine.poll() is None:
            engine.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                engine.wait(timeout=20)
            if engine.poll() is None:
                engine.kill()
        shutil.rmtree(folder, ignore_errors=True)
    code = engine.wait()
    print(f"[gate] the engine exited with code {code}", file=sys.stderr, flush=True)
    return code if server.started else (code or 1)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: python -m trainer.vllm.gate --host H --port P --token-file F -- VLLM_ARGV...", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="python -m trainer.vllm.gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    args = parser.parse_args(argv[:split])
    if not argv[split + 1 :]:
        parser.error("no engine command after --")
    return run_gate(args.host, args.port, args.token_file, argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
