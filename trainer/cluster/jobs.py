"""The one path for every job a stage hands to a Ray cluster: submit, follow, stop, look up — through the Jobs API.

A job is ``python -m <module> <args...>`` run in a copy of this repository (the runtime env's ``working_dir``,
ignoring ``EXCLUDES``) on a node that has the job's ``resources`` (``entrypoint_resources``: a CPU cluster names its
trainer nodes ``{"trainer": 1}``), with its ``submission_id`` chosen by the caller — so a caller that died can find
its job again by the id it recorded, and a resubmission is a new id, never a second copy of a running one.

Every call to the cluster is bounded: the Jobs SDK's requests have no timeout of their own, so each runs in a daemon
thread waited for at most ``request_timeout_s`` (``JobsError`` past it). ``follow`` polls the job's status and log
(``get_job_logs``; the log's new text each time) until the job ends, calling back with new log text and on every
poll (a caller ingests shards, checks for cancellation there), and stops the job past its deadline.

    jobs = RayJobs("http://127.0.0.1:8265")
    job_id = jobs.submit(JobCommand("trainer.cluster.train_job", [str(spec)]), submission_id="rl-recipe-...")
    status = jobs.follow(job_id, timeout_s=3600, on_log=print)       # "SUCCEEDED" | "FAILED" | "STOPPED" | "TIMEOUT"

Killing the process that follows a job does not touch the job: Ray runs it apart from its submitter.
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from envs.errors import RecipeError

REPO_ROOT = Path(__file__).resolve().parents[2]
EXCLUDES = [".git", ".venv*", "data/", "runs/", "models/", ".prefect/", "**/__pycache__", ".pytest_cache/", ".cluster/"]
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
ACTIVE = frozenset({"PENDING", "RUNNING"})
POLL_S = 2.0
T = TypeVar("T")


class JobsError(RecipeError, RuntimeError):
    """The cluster could not be reached, refused the job, or did not answer in time."""


@dataclass(frozen=True)
class JobCommand:
    """What a job runs: ``python -m module args...`` in the uploaded repository, with ``env`` set."""

    module: str
    args: Sequence[str] = ()
    python: str = "python"
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    """Custom resources the node running the entry point must have (``entrypoint_resources``)."""
    working_dir: Path = REPO_ROOT

    def entrypoint(self) -> str:
        """The job's shell command, each word quoted for the shell."""
        return shlex.join([self.python, "-m", self.module, *self.args])

    def runtime_env(self) -> dict[str, Any]:
        """This repository as working dir (uploaded), unbuffered output, ``env``."""
        return {
            "working_dir": str(self.working_dir),
            "excludes": list(EXCLUDES),
            "env_vars": {"PYTHONUNBUFFERED": "1", **self.env},
        }


def bounded(call: Callable[[], T], timeout_s: float, what: str) -> T:
    """``call()`` in a daemon thread, waited for at most ``timeout_s``; its error, or the wait, as ``JobsError``."""
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
        raise JobsError(f"{what}: no answer from the Ray cluster within {timeout_s:g} s")
    if "error" in result:
        error = result["error"]
        raise JobsError(f"{what}: {type(error).__name__}: {' '.join(str(error).split())[:400]}") from error
    return result["value"]


class RayJobs:
    """The Jobs API of the cluster whose dashboard is at ``address`` (``http://HOST:8265``)."""

    def __init__(self, address: str, request_timeout_s: float = 30.0, client: Any = None) -> None:
        """``client``: a ``JobSubmissionClient`` stand-in (tests); by default one is connected to ``address``."""
        if not address.startswith(("http://", "https://")):
            raise JobsError(f"address {address!r} is not a Ray dashboard URL (http://HOST:8265)")
        self.address, self.request_timeout_s = address, request_timeout_s
        if client is None:
            os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local cluster without token auth (ray 2.5x+)
            from ray.job_submission import JobSubmissionClient

            client = bounded(lambda: JobSubmissionClient(address), request_timeout_s, f"connect to {address}")
        self._client = client

    def _call(self, call: Callable[[], T], what: str, timeout_s: float | None = None) -> T:
        return bounded(call, timeout_s or self.request_timeout_s, what)

    def submit(
        self, command: JobCommand, submission_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str:
        """Submit ``command``; its job id (``submission_id`` when given)."""
        return self._call(
            lambda: self._client.submit_job(
                entrypoint=command.entrypoint(),
                submission_id=submission_id,
                runtime_env=command.runtime_env(),
                metadata=dict(metadata or {}),
                entrypoint_num_cpus=0,
                entrypoint_resources=dict(command.resources) or None,
            ),
            "submit job",
            max(self.request_timeout_s, 120.0),  # the working dir is uploaded first
        )

    def status(self, job_id: str) -> str:
        status = self._call(lambda: self._client.get_job_status(job_id), "job status")
        return str(getattr(status, "value", status))

    def find(self, job_id: str) -> str | None:
        """The job's status, or None when the cluster does not know the id (a restarted cluster, a typo)."""
        try:
            return self.status(job_id)
        except JobsError as error:
            if "does not exist" in str(error) or "404" in str(error):
                return None
            raise

    def logs(self, job_id: str) -> str:
        return self._call(lambda: self._client.get_job_logs(job_id), "job logs")

    def stop(self, job_id: str) -> bool:
        """Ask the job to stop (SIGTERM to its entry point, SIGKILL after Ray's grace period); False if it had ended."""
        return bool(self._call(lambda: self._client.stop_job(job_id), "stop job"))

    def listing(self) -> list[dict[str, Any]]:
        """Every job the cluster knows: id, status, entry point, metadata."""
        details = self._call(self._client.list_jobs, "list jobs")
        return [
            {
                "submission_id": d.submission_id,
                "status": str(getattr(d.status, "value", d.status)),
                "entrypoint": d.entrypoint,
                "metadata": d.metadata or {},
                "driver_node_id": d.driver_node_id,
            }
            for d in details
        ]

    def follow(
        self,
        job_id: str,
        *,
        timeout_s: float,
        on_log: Callable[[str], None] | None = None,
        on_poll: Callable[[], None] | None = None,
        poll_s: float = POLL_S,
    ) -> str:
        """Poll the job until it ends: its final status, or ``TIMEOUT`` after ``timeout_s`` (the job is then stopped).
        ``on_log`` gets each poll's new log text; ``on_poll`` runs after every poll and at the end (it may raise to
        stop following: the job goes on)."""
        deadline, shown = time.monotonic() + timeout_s, 0
        while True:
            status = self.status(job_id)
            text = self.logs(job_id)
            if on_log is not None and len(text) > shown:
                on_log(text[shown:])
            shown = max(shown, len(text))
            if on_poll is not None:
                on_poll()
            if status in TERMINAL:
                return status
            if time.monotonic() > deadline:
                self.stop(job_id)
                return "TIMEOUT"
            time.sleep(poll_s)
