"""Real server processes for the operations and browser tests: `recipe server` and `recipe serve` as subprocesses.

``prefect_server`` (module scope) starts a Prefect server on a free loopback port with its own PREFECT_HOME and yields
the environment a client needs; ``serve_deployments(env, profile)`` starts `recipe serve` against it and waits until
the deployments are registered. ``api(env, method, path)`` calls the server's REST API.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from envs.net import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0
DEPLOYMENTS = 9  # the pipeline, the nightly gate, seven stages


def wait_for(check, timeout_s: float, what: str, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:g} s")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("prefect-server")
    port = free_port()
    env = os.environ | {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    log = (home / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "server", "--port", str(port)], env=env, cwd=REPO, stdout=log, stderr=log
    )

    def healthy() -> bool:
        try:
            return httpx.get(f"{env['PREFECT_API_URL']}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, START_TIMEOUT_S, "prefect server start")
        yield env
    finally:
        stop(process)


def api(env: dict[str, str], method: str, path: str, **kwargs: Any) -> Any:
    response = httpx.request(method, f"{env['PREFECT_API_URL']}{path}", timeout=30, **kwargs)
    response.raise_for_status()
    return response.json() if response.content else None


@contextmanager
def serve_deployments(env: dict[str, str], profile: str, log: Path) -> Iterator[None]:
    """`recipe serve --profile PROFILE` until the block ends; waits for every deployment to be registered."""
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "flows.cli", "serve", "--profile", profile],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=out,
        )
        try:
            count = lambda: len(api(env, "POST", "/deployments/filter", json={})) >= DEPLOYMENTS  # noqa: E731
            wait_for(count, START_TIMEOUT_S, "recipe serve")
            yield
        finally:
            stop(process)


@pytest.fixture(scope="session")
def ops() -> SimpleNamespace:
    """The helpers above for test modules (a conftest's plain functions are not importable under importlib mode)."""
    return SimpleNamespace(api=api, wait_for=wait_for, serve=serve_deployments, repo=REPO)
