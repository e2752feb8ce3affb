"""Loopback helpers: a free TCP port, and an ASGI app served by uvicorn in a background thread.

Used wherever a real HTTP peer runs in-process: tests (scripted engines, judge servers, gateways), benchmarks, and
local engines behind the vLLM wire protocol.

Example::

    with serve_in_thread(create_app(engine, "policy")) as url:
        httpx.get(f"{url}/health")
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it; a race with another process is possible)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


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
