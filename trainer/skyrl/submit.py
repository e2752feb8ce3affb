"""Submit a SkyRL run as a Ray Job, stream its log, and read its metrics into ``train_steps`` rows.

The job's entry point is ``python -m <module> <overrides...>`` run in a copy of this repository (the runtime env's
``working_dir``, ignoring what ``.gitignore`` ignores plus ``EXCLUDES``), with the given environment variables. The
log is streamed with ``tail_job_logs`` (the Jobs API's websocket; it needs ``aiohttp``, part of ``ray[default]``) or,
without it, by polling ``get_job_logs``. Every call to the cluster is bounded: the client's connection and each
request by ``request_timeout_s``, the whole job by ``timeout_s`` (past it the job is stopped and reported as
``TIMEOUT``).

    outcome = submit_job("http://127.0.0.1:8265", overrides.lines(), module=DRY_RUN_MODULE, timeout_s=300)
    outcome.status, outcome.rows          # "SUCCEEDED", [{"stage": "hero", "step": 1, ...}, ...]

The cluster needs the repository's dependencies for the module it runs (the dry run: PyYAML only) and, for a real
run, SkyRL with Megatron and vLLM (the ``cluster`` extra) on every node.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from envs.errors import RecipeError
from trainer.skyrl.metrics import metric_blocks, train_step_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
DRY_RUN_MODULE = "trainer.skyrl.dryrun"
ENTRY_MODULE = "trainer.skyrl.main"
"""The real run's entry point: SkyRL's fully-async trainer with our harness as its generator (``generator``)."""
EXCLUDES = [".git", ".venv*", "data/", "runs/", "models/", ".prefect/", "**/__pycache__", ".pytest_cache/"]
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
T = TypeVar("T")


class SubmitError(RecipeError, RuntimeError):
    """The cluster could not be reached, refused the job, or did not answer in time."""


@dataclass(frozen=True)
class JobOutcome:
    job_id: str
    status: str
    """SUCCEEDED | FAILED | STOPPED, or TIMEOUT when the job outlived ``timeout_s`` (it is then stopped)."""
    logs: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    """``train_steps`` rows from the log's metric blocks."""

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCEEDED"


def entrypoint(module: str, overrides: Sequence[str], python: str = "python") -> str:
    """The job's shell command: ``python -m module`` + the overrides, each quoted for the shell."""
    return shlex.join([python, "-m", module, *overrides])


def runtime_env(working_dir: Path = REPO_ROOT, env_vars: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The job's runtime env: this repository as working dir (uploaded), unbuffered output, ``env_vars``."""
    return {
        "working_dir": str(working_dir),
        "excludes": list(EXCLUDES),
        "env_vars": {"PYTHONUNBUFFERED": "1", **(env_vars or {})},
    }


def _bounded(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """``call()`` in a daemon thread, waited for at most ``timeout_s`` (the Jobs SDK's requests have no timeout)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = call()
        except BaseException as error:
            result["error"] = error

    thread = threading.Thread(target=target, name=f"ray-jobs-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise SubmitError(f"{what}: no answer from the Ray cluster within {timeout_s:g} s")
    if "error" in result:
        error = result["error"]
        raise SubmitError(f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:400]}") from error
    return result["value"]


def connect(address: str, request_timeout_s: float = 30.0) -> Any:
    """A ``JobSubmissionClient`` for the dashboard at ``address`` (``http://HOST:8265``)."""
    if not address.startswith(("http://", "https://")):
        raise SubmitError(f"address {address!r} is not a dashboard URL (http://HOST:8265)")
    from ray.job_submission import JobSubmissionClient

    return _bounded(lambda: JobSubmissionClient(address), request_timeout_s, f"connect to {address}")


def _status(client: Any, job_id: str, request_timeout_s: float) -> str:
    status = _bounded(lambda: client.get_job_status(job_id), request_timeout_s, "job status")
    return str(getattr(status, "value", status))


async def _tail(client: Any, job_id: str, deadline: float, echo: Callable[[str], None] | None) -> list[str]:
    chunks: list[str] = []

    async def follow() -> None:
        async for chunk in client.tail_job_logs(job_id):
            chunks.append(chunk)
            if echo:
                echo(chunk)

    with contextlib.suppress(TimeoutError):  # the deadline passed: the caller reads the status and stops the job
        await asyncio.wait_for(follow(), max(0.0, deadline - time.monotonic()))
    return chunks


def _poll(
    client: Any, job_id: str, deadline: float, echo: Callable[[str], None] | None, request_timeout_s: float
) -> None:
    """Follow the log by polling ``get_job_logs`` until the job ends or the deadline passes."""
    shown = 0
    while time.monotonic() < deadline:
        done = _status(client, job_id, request_timeout_s) in TERMINAL
        logs = _bounded(lambda: client.get_job_logs(job_id), request_timeout_s, "job logs")
        if echo and len(logs) > shown:
            echo(logs[shown:])
        shown = len(logs)
        if done:
            return
        time.sleep(1.0)


def follow_job(
    client: Any,
    job_id: str,
    timeout_s: float,
    *,
    echo: Callable[[str], None] | None = None,
    request_timeout_s: float = 30.0,
    stage: str = "hero",
    run: str = "skyrl",
    stream: bool | None = None,
) -> JobOutcome:
    """Stream the job's log until it ends (at most ``timeout_s``), then its final status, log and metric rows.
    ``stream``: follow with ``tail_job_logs`` (True) or by polling (False); None: stream when aiohttp imports."""
    deadline = time.monotonic() + timeout_s
    if stream is None:
        stream = importlib.util.find_spec("aiohttp") is not None
    if stream:
        try:
            asyncio.run(_tail(client, job_id, deadline, echo))
        except Exception as error:  # the websocket failed or closed early: fall back to polling
            if echo:
                echo(f"[submit] log stream ended ({error}); polling the log instead\n")
            _poll(client, job_id, deadline, None, request_timeout_s)
    else:
        _poll(client, job_id, deadline, echo, request_timeout_s)
    status = _status(client, job_id, request_timeout_s)
    while status not in TERMINAL and time.monotonic() < deadline:  # the stream can close just before the status
        time.sleep(0.5)
        status = _status(client, job_id, request_timeout_s)
    if status not in TERMINAL:
        _bounded(lambda: client.stop_job(job_id), request_timeout_s, "stop job")
        status = "TIMEOUT"
    logs = _bounded(lambda: client.get_job_logs(job_id), request_timeout_s, "job logs")
    rows = train_step_rows(metric_blocks(logs.splitlines()), stage=stage, run=run)
    return JobOutcome(job_id=job_id, status=status, logs=logs, rows=rows)


def submit_job(
    address: str,
    overrides: Sequence[str],
    *,
    module: str = DRY_RUN_MODULE,
    module_args: Sequence[str] = (),
    python: str = "python",
    working_dir: Path = REPO_ROOT,
    env_vars: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
    request_timeout_s: float = 30.0,
    echo: Callable[[str], None] | None = None,
    stage: str = "hero",
    run: str = "skyrl",
) -> JobOutcome:
    """Submit ``python -m module [module_args] overrides...`` to the cluster at ``address`` and follow it to the end."""
    client = connect(address, request_timeout_s)
    job_id = _bounded(
        lambda: client.submit_job(
            entrypoint=entrypoint(module, [*module_args, *overrides], python),
            runtime_env=runtime_env(working_dir, env_vars),
            entrypoint_num_cpus=0,
        ),
        max(request_timeout_s, 120.0),  # the working dir is uploaded first
        "submit job",
    )
    if echo:
        echo(f"[submit] job {job_id} submitted to {address}\n")
    return follow_job(client, job_id, timeout_s, echo=echo, request_timeout_s=request_timeout_s, stage=stage, run=run)
