"""Real server processes for the operations and browser tests: `recipe server` and `recipe serve` as subprocesses.

``prefect_server`` (module scope) starts a Prefect server on a free loopback port with its own PREFECT_HOME and yields
the environment a client needs; ``serve_deployments(env, profile)`` starts `recipe serve` against it and waits until
the deployments are registered. ``api(env, method, path)`` calls the server's REST API. ``stop_tree(process)`` stops a
server, `recipe serve` or a worker and then every process it started that still runs (flow runs run in their own
sessions, and keep running when the process that started them stops), so a failed test leaves nothing running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from envs.net import free_port
from envs.scratch import process_running

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180.0
DEPLOYMENTS = 9  # the pipeline, the nightly gate, seven stages
SERVING = "Your deployments are being served"  # what `prefect.serve` prints once it has registered them all


def wait_for(check, timeout_s: float, what: str, every_s: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:g} s")


def interruptible() -> None:
    """``preexec_fn`` of a process ``stop`` interrupts: SIGINT back to its default. Started from a shell's background
    job (``make test-slow &``), a process inherits SIGINT ignored; a Prefect worker's handler then "forwards" SIGINT
    to itself under that inherited disposition, and never stops."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(process: subprocess.Popen, hung: signal.Signals | None = None) -> bool:
    """SIGINT, then SIGKILL after 30 s (``hung`` first, e.g. SIGABRT for faulthandler's thread dump, when given);
    whether it stopped on SIGINT."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
        return True
    except subprocess.TimeoutExpired:
        if hung is not None:
            process.send_signal(hung)
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        process.kill()
        process.wait(timeout=10)
        return False


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, theirs, …), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, …
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (not exited, not a zombie)."""
    return [pid for pid in pids if process_running(pid)]


def stop_tree(process: subprocess.Popen, hung: signal.Signals | None = None) -> tuple[bool, list[int]]:
    """``stop(process, hung)``, then SIGKILL to every process it had started that still runs (and theirs); whether it
    stopped on SIGINT, and the processes that had to be killed."""
    below = descendants(process.pid)
    clean = stop(process, hung)
    left = running(sorted({*below, *(d for pid in below for d in descendants(pid))}))
    for pid in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return clean, left


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory) -> Iterator[dict[str, str]]:
    with prefect_server_process(tmp_path_factory.mktemp("prefect-server")) as (_, env):
        yield env


@contextmanager
def prefect_server_process(home: Path) -> Iterator[tuple[subprocess.Popen, dict[str, str]]]:
    """`recipe server` on a free port with ``home`` as PREFECT_HOME, until the block ends: its process and the
    environment a client needs."""
    port = free_port()
    env = os.environ | {
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    log = (home / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "server", "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=log,
        preexec_fn=interruptible,
    )

    def healthy() -> bool:
        try:
            return httpx.get(f"{env['PREFECT_API_URL']}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, START_TIMEOUT_S, "prefect server start")
        yield process, env
    finally:
        stop_tree(process)


def api(env: dict[str, str], method: str, path: str, **kwargs: Any) -> Any:
    """One REST call; a 503 (the server's "retry": its SQLite database was busy, as under several runs at once) is
    retried after 0.5, 1, 2, 4 and 8 s, as Prefect's own client does."""
    for wait_s in (0.5, 1, 2, 4, 8, None):
        response = httpx.request(method, f"{env['PREFECT_API_URL']}{path}", timeout=30, **kwargs)
        if response.status_code != 503 or wait_s is None:
            break
        time.sleep(wait_s)
    response.raise_for_status()
    return response.json() if response.content else None


@contextmanager
def serve_deployments(env: dict[str, str], profile: str, log: Path) -> Iterator[None]:
    """`recipe serve --profile PROFILE` until the block ends; waits for every deployment to be registered by it (on a
    server that had them from an earlier `recipe serve`, counting them is not enough: registering replaces their
    schedules, and would replace what the test set meanwhile)."""
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--profile", profile],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=out,
            preexec_fn=interruptible,
        )
        try:

            def served() -> bool:
                assert process.poll() is None, f"recipe serve exited: {log.read_text()[-2000:]}"
                return (
                    SERVING in log.read_text() and len(api(env, "POST", "/deployments/filter", json={})) >= DEPLOYMENTS
                )

            wait_for(served, START_TIMEOUT_S, "recipe serve")
            yield
        finally:
            stop_tree(process)  # and the flow runs a failed test left running


@pytest.fixture(scope="session")
def ops() -> SimpleNamespace:
    """The helpers above for test modules (a conftest's plain functions are not importable under importlib mode)."""
    return SimpleNamespace(
        api=api,
        wait_for=wait_for,
        serve=serve_deployments,
        stop_tree=stop_tree,
        server_process=prefect_server_process,
        running=running,
        interruptible=interruptible,
        repo=REPO,
    )
