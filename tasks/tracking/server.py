"""A local MLflow tracking server (``recipe tracking up`` / ``down``), on loopback, with a SQLite store.

``up`` starts ``mlflow server`` detached (its own session, so closing the shell leaves it running), its store and
artifacts under ``root`` (``.tracking/`` in the checkout), its log in ``root/server.log``; it returns once the server
answers ``/health`` and records the process (pid and start time: a reused pid is never signalled) in
``root/server.json``. ``down`` stops that process and nothing else. A profile points at it with
``tracking.mlflow_uri: http://127.0.0.1:5000``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from pydantic import BaseModel

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.net import LOOPBACK
from envs.scratch import owner_alive, owner_tag, process_running

STATE_FILE, LOG_FILE = "server.json", "server.log"
START_TIMEOUT_S, STOP_TIMEOUT_S = 120.0, 20.0


class TrackingServerError(RecipeError, RuntimeError):
    """The tracking server could not be started or stopped as asked; the message says why and where its log is."""


class ServerState(BaseModel):
    url: str
    process: str
    """``<pid>-<start ticks>`` of the server's process (``envs.scratch.owner_tag``)."""
    root: str


def server_command(root: Path, port: int, python: str = sys.executable) -> list[str]:
    """``mlflow server`` on loopback: runs in ``root/mlflow.db``, artifacts served from ``root/artifacts``."""
    return [
        python, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{(root / 'mlflow.db').resolve()}",
        "--artifacts-destination", str((root / "artifacts").resolve()),
        "--host", LOOPBACK, "--port", str(port), "--workers", "1",
    ]  # fmt: skip


def read_server(root: Path) -> ServerState | None:
    """The server ``up`` started under ``root``, when it still runs."""
    try:
        state = ServerState.model_validate_json((root / STATE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return state if _alive(state.process) else None


def _alive(process: str) -> bool:
    """The recorded process, still running (not a reused pid, not a zombie)."""
    return owner_alive(process) and process_running(int(process.split("-")[0]))


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def start_server(root: Path, port: int, timeout_s: float = START_TIMEOUT_S) -> ServerState:
    running = read_server(root)
    if running is not None:
        return running
    root.mkdir(parents=True, exist_ok=True)
    url = f"http://{LOOPBACK}:{port}"
    if answers(url):
        raise TrackingServerError(f"port {port} already serves something: pick another with --port")
    with (root / LOG_FILE).open("ab") as out:
        process = subprocess.Popen(
            server_command(root, port), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    state = ServerState(url=url, process=owner_tag(process.pid), root=str(root.resolve()))
    deadline = time.monotonic() + timeout_s
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process.pid)
            why = f"exited {process.returncode}" if process.poll() is not None else f"no answer in {timeout_s:g} s"
            raise TrackingServerError(f"the MLflow server did not start ({why}); its log: {root / LOG_FILE}")
        time.sleep(0.5)
    atomic_write_text(root / STATE_FILE, state.model_dump_json() + "\n")
    return state


def stop_server(root: Path, timeout_s: float = STOP_TIMEOUT_S) -> bool:
    """Stop the server ``up`` started under ``root``; False when none was running."""
    state = read_server(root)
    (root / STATE_FILE).unlink(missing_ok=True)
    if state is None:
        return False
    pid = int(state.process.split("-")[0])
    _stop_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(state.process) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(state.process):
        _stop_group(pid)
    return True


def _stop_group(pid: int, signum: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
