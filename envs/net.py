"""Loopback helpers: a free TCP port, an ASGI app served by uvicorn in a background thread, and the guard that keeps
other sites' pages off a server on loopback.

Used wherever a real HTTP peer runs in-process: tests (scripted engines, judge servers, gateways), benchmarks, and
local engines behind the vLLM wire protocol. ``LocalSiteGuard`` wraps every app a user's browser could reach on this
machine (the engine's server, the trace explorer).

Example::

    with serve_in_thread(create_app(engine, "policy")) as url:
        httpx.get(f"{url}/health")
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK = "127.0.0.1"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""What a client on this machine may call a server on loopback in its ``Host`` header (with the port)."""
_DEFAULT_PORTS = {"http": 80, "https": 443}


def free_port(host: str = LOOPBACK, within: tuple[int, int] | None = None) -> int:
    """A TCP port nothing listens on right now: the OS's pick, or the first free one in ``within`` (both ends
    included). A race with another process is possible."""
    for port in range(within[0], within[1] + 1) if within else (0,):
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
            return int(probe.getsockname()[1])
    raise OSError(f"no free port on {host} in {within[0]}-{within[1]}" if within else f"no free port on {host}")


@contextmanager
def serve_in_thread(
    app: Any, *, host: str = LOOPBACK, start_timeout_s: float = 30.0, stop_timeout_s: float = 5.0, log_level="warning"
) -> Iterator[str]:
    """Serve ``app`` on a free port in a daemon thread; yield its base URL once it accepts connections, stop on exit."""
    port = free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level))
    thread = threading.Thread(target=server.run, name=f"uvicorn:{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"the server on {host}:{port} did not start within {start_timeout_s:g} s")
            time.sleep(0.02)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=stop_timeout_s)


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or ``localhost``) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def foreign_site(connection: HTTPConnection) -> str | None:
    """Why a request looks sent by another site's page in a browser (None: it does not), on one line.

    A page on any site can make its visitor's browser send simple requests to 127.0.0.1 (a form POST needs no CORS
    preflight), and after DNS rebinding (its own name re-pointed at 127.0.0.1) read the answers too. The browser gives
    both away: it names the page's site in ``Origin`` on every cross-site POST (``foreign_origin``), and the rebound
    name in ``Host`` (``rebound_host``). Python clients (the trainer, evals, tests) send no ``Origin`` and the address
    they dialled.
    """
    return foreign_origin(connection) or rebound_host(connection)


def foreign_origin(connection: HTTPConnection) -> str | None:
    """An ``Origin``, when sent, must be this server's own."""
    host = connection.headers.get("host", "").lower()
    origin = connection.headers.get("origin")
    if origin is not None and origin.lower() != f"{connection.url.scheme}://{host}":
        return f"refused: Origin {origin!r} is another site's; a page may only use the server it was served from"
    return None


def rebound_host(connection: HTTPConnection) -> str | None:
    """A server reached over loopback must be called by a loopback name with its port."""
    host = connection.headers.get("host", "").lower()
    scheme = connection.url.scheme
    server = connection.scope.get("server")
    if server is not None and is_loopback(server[0]):
        port = server[1] or _DEFAULT_PORTS.get(scheme)
        bare = LOOPBACK_NAMES if port == _DEFAULT_PORTS.get(scheme) else ()
        if host not in {*(f"{name}:{port}" for name in LOOPBACK_NAMES), *bare}:
            return f"refused: Host {host!r} is not this server's address ({LOOPBACK} or localhost, port {port})"
    return None


class LocalSiteGuard:
    """ASGI middleware answering ``refuse(reason)`` to every HTTP request ``foreign_site`` finds (in the wrapped app's
    own error shape), and passing the rest to ``app``.

    Example::

        app.add_middleware(LocalSiteGuard, refuse=lambda reason: JSONResponse({"error": reason}, 403))
    """

    def __init__(self, app: ASGIApp, refuse: Callable[[str], Response]) -> None:
        self.app = app
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reason = foreign_site(HTTPConnection(scope)) if scope["type"] == "http" else None
        handler = self.app if reason is None else self.refuse(reason)
        await handler(scope, receive, send)
