"""The one path for every job a stage hands to a Ray cluster: submit, follow, stop, look up — Ray's Jobs REST API.

A job is ``python -m <module> <args...>`` run in a copy of this repository (zipped by Ray's own packaging helper,
ignoring ``EXCLUDES`` and what ``.gitignore`` ignores, and uploaded once per content) on a node that has the job's
``resources`` (``entrypoint_resources``: a CPU cluster names its trainer nodes ``{"trainer": 1}``), with its
``submission_id`` chosen by the caller — so a caller that died can find its job again by the id it recorded, and a
resubmission is a new id, never a second copy of a running one.

The client speaks the dashboard's HTTP API with ``httpx`` (``/api/jobs/``, ``/api/packages/``): no ``ray[default]``
on the submitting side (Ray's own SDK refuses to start without the dashboard's extras), and every call is bounded by
``request_timeout_s`` (the upload by ``UPLOAD_TIMEOUT_S``). ``follow`` polls the job's status and log until it ends,
calling back with new log text and on every poll (a caller ingests shards and checks for cancellation there), and
stops the job past its deadline.

    jobs = RayJobs("http://127.0.0.1:8265")
    job_id = jobs.submit(JobCommand("trainer.cluster.train_job", [str(spec)]), submission_id="rl-recipe-...")
    status = jobs.follow(job_id, timeout_s=3600, on_log=print)       # "SUCCEEDED" | "FAILED" | "STOPPED" | "TIMEOUT"

Killing the process that follows a job does not touch the job: Ray runs it apart from its submitter. An entry point
calls ``leave_working_dir`` first: the folder Ray unpacked its code into is not its to keep.
"""

from __future__ import annotations

import logging
import os
import shlex
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from envs.errors import RecipeError
from envs.tokens import read_token_file

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
EXCLUDES = [".git", ".venv*", "data/", "runs/", "models/", ".prefect/", "**/__pycache__", ".pytest_cache/", ".cluster/"]
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
ACTIVE = frozenset({"PENDING", "RUNNING"})
POLL_S = 2.0
UPLOAD_TIMEOUT_S = 300.0
NO_AGENT = "No available agent"
"""Ray's dashboard refuses a submission with HTTP 500 and "No available agent to submit job, please try again later"
until a node's dashboard agent has registered with the head, which can lag the node's start by minutes on a loaded
machine (seen: 2 min after `recipe cluster up` saw all three nodes)."""
AGENT_WAIT_S = 300.0


def ray_token(token_file: Path | None = None) -> str | None:
    """The token a client of a Ray cluster sends: the file given, else Ray's own places (``$RAY_AUTH_TOKEN``,
    ``$RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``); None when there is none (a cluster without authentication)."""
    if token_file is not None:
        return read_token_file(token_file)
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    for candidate in (os.environ.get("RAY_AUTH_TOKEN_PATH"), Path.home() / ".ray" / "auth_token"):
        if candidate and Path(candidate).is_file():
            return read_token_file(Path(candidate))
    return None


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


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


class RayJobs:
    """The Jobs API of the cluster whose dashboard is at ``address`` (``http://HOST:8265``)."""

    def __init__(
        self,
        address: str,
        request_timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        token_file: Path | None = None,
    ) -> None:
        """``transport``: an httpx transport to answer instead of a cluster (tests); ``token_file``: the cluster's
        token (default: Ray's own places, ``ray_token``)."""
        if not address.startswith(("http://", "https://")):
            raise JobsError(f"address {address!r} is not a Ray dashboard URL (http://HOST:8265)")
        self.address = address.rstrip("/")
        headers = auth_headers(ray_token(token_file))
        self._http = httpx.Client(
            base_url=self.address, timeout=request_timeout_s, transport=transport, headers=headers
        )

    def _request(self, method: str, path: str, what: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as error:
            raise JobsError(f"connect to {self.address}: {error}") from None
        except httpx.TimeoutException as error:
            raise JobsError(
                f"{what}: no answer from the Ray cluster at {self.address} ({type(error).__name__})"
            ) from None
        except httpx.HTTPError as error:
            raise JobsError(f"{what}: {type(error).__name__}: {error}") from None
        if response.status_code in (401, 403):
            raise JobsError(
                f"{what}: the Ray cluster at {self.address} refused the request (HTTP {response.status_code}): it "
                "wants its token — cluster.auth_token_file in the profile, or Ray's own $RAY_AUTH_TOKEN, "
                "$RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token (`recipe cluster up` writes .cluster/<profile>/auth_token)"
            )
        if response.status_code >= 400 and response.status_code != 404:
            raise JobsError(f"{what}: HTTP {response.status_code}: {' '.join(response.text.split())[:400]}")
        return response

    def _json(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        response = self._request(method, path, what, **kwargs)
        if response.status_code == 404:
            raise JobsError(f"{what}: {path} does not exist on {self.address}")
        try:
            return response.json()
        except ValueError:
            raise JobsError(f"{what}: the reply is not JSON: {response.text[:200]!r}") from None

    def upload(self, working_dir: Path) -> str:
        """``working_dir`` as a package on the cluster (uploaded unless one with its content is there); its URI."""
        from ray._private.runtime_env.packaging import create_package, get_uri_for_directory

        # Ray's helper logs each .gitignore it honours at INFO: a screen of noise per submission.
        logging.getLogger("ray._private.runtime_env.packaging").setLevel(logging.WARNING)
        uri = get_uri_for_directory(str(working_dir), include_gitignore=True, excludes=EXCLUDES)
        protocol, name = uri.split("://", 1)
        path = f"/api/packages/{protocol}/{name}"
        if self._request("GET", path, "look up the package").status_code == 200:
            return uri
        with tempfile.TemporaryDirectory() as tmp:
            package = Path(tmp) / name
            create_package(str(working_dir), package, include_gitignore=True, excludes=EXCLUDES)
            self._request("PUT", path, "upload the working dir", content=package.read_bytes(), timeout=UPLOAD_TIMEOUT_S)
        return uri

    def submit(
        self, command: JobCommand, submission_id: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> str:
        """Submit ``command`` (its working dir uploaded first); its job id (``submission_id`` when given)."""
        runtime_env = command.runtime_env() | {"working_dir": self.upload(command.working_dir)}
        runtime_env.pop("excludes")
        body = {
            "entrypoint": command.entrypoint(),
            "submission_id": submission_id,
            "runtime_env": runtime_env,
            "metadata": dict(metadata or {}),
            "entrypoint_num_cpus": 0,
            "entrypoint_resources": dict(command.resources) or None,
        }
        deadline = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                return str(self._json("POST", "/api/jobs/", "submit job", json=body)["submission_id"])
            except JobsError as error:
                if NO_AGENT not in str(error) or time.monotonic() >= deadline:
                    raise
                logger.info("submit job: the cluster has no job agent yet; trying again in %g s", POLL_S)
            time.sleep(POLL_S)

    def find(self, job_id: str) -> str | None:
        """The job's status, or None when the cluster does not know the id (a restarted cluster, a typo)."""
        response = self._request("GET", f"/api/jobs/{job_id}", "job status")
        if response.status_code == 404:
            return None
        return str(response.json()["status"])

    def status(self, job_id: str) -> str:
        status = self.find(job_id)
        if status is None:
            raise JobsError(f"job status: the cluster at {self.address} knows no job {job_id!r}")
        return status

    def logs(self, job_id: str) -> str:
        return str(self._json("GET", f"/api/jobs/{job_id}/logs", "job logs").get("logs", ""))

    def logs_if_any(self, job_id: str) -> str | None:
        """The job's log, or None when the dashboard cannot fetch it (the node that ran the job is gone)."""
        try:
            return self.logs(job_id)
        except JobsError:
            return None

    def stop(self, job_id: str) -> bool:
        """Ask the job to stop (SIGTERM to its entry point, SIGKILL after Ray's grace period); False if it had ended
        or the cluster does not know it (a job recorded on a cluster since restarted: nothing left to stop)."""
        response = self._request("POST", f"/api/jobs/{job_id}/stop", "stop job")
        if response.status_code == 404:
            return False
        return bool(response.json().get("stopped", False))

    def listing(self) -> list[dict[str, Any]]:
        """Every job the cluster knows: id, status, entry point, metadata, the node its driver ran on."""
        return [
            {
                "submission_id": job.get("submission_id"),
                "status": job.get("status"),
                "entrypoint": job.get("entrypoint"),
                "metadata": job.get("metadata") or {},
                "driver_node_id": job.get("driver_node_id"),
            }
            for job in self._json("GET", "/api/jobs/", "list jobs")
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
        ``on_log`` gets each poll's new log text; ``on_poll`` runs after every poll (it may raise to stop following:
        the job goes on)."""
        deadline, shown = time.monotonic() + timeout_s, 0
        while True:
            status = self.status(job_id)
            text = self.logs_if_any(job_id) or ""
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


def leave_working_dir(folder: Path) -> None:
    """Move a job's entry point out of the folder Ray unpacked its code into, to ``folder`` (one the job owns).

    The nodes of a one-machine cluster share Ray's temp folder, and a node's runtime-env agent that has not seen a
    package unpacks it again over the copy another node's job runs in, deleting that job's working folder under it
    (measured: the hero job's cwd "(deleted)", 2,012 of its tool calls failing "No such file or directory"). Its
    modules stay importable: the package comes back at the same path."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chdir(folder)
