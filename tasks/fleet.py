"""The run's vLLM engines (engine backend ``vllm``): started by the first stage that generates, reused by every later
stage and by a resumed run, stopped when the pipeline ends.

Two placements of the same fleet:

* **on the cluster** (a ``ClusterTarget``): one long-lived Ray Job, ``trainer.cluster.engine_job``, whose actors run
  the servers on the nodes with the engines' resources. Its id goes to ``<shared root>/engines/fleet.json``; a later
  stage — or a resumed run, after the flow's process was killed — finds it RUNNING, reads the URLs the job wrote
  (``engines.json``) and checks each answers ``/health``. A fleet whose job ended, or whose launch settings changed
  (another model, context or engine count: the spec's digest), is started again.
* **here** (no cluster): the servers as child processes of this one (``trainer.vllm.server``), kept for the
  process's lifetime and reused by its later stages.

Stages never talk to a server directly: ``engines(staging)`` returns the ``RemoteEngines`` a ``RemoteFleet`` client
or a training loop uses, with the folder its weight versions go to and the fleet's token file (``token`` in the
fleet's folder, made once, mode 0600: every engine's gate wants it on every route, ``trainer.vllm.gate``). A base
that ties its embeddings is served from an untied copy in the fleet's folder (``trainer.vllm.remote.untied_copy``:
vLLM's in-place reload keeps a tied head).

    fleet = VllmFleet(FleetSpec(..., state_file=root / "engines.json", logs_dir=root / "logs"), cluster=target)
    engines = fleet.engines(staging=root / "weights")     # starts or reattaches
    fleet.stop()
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from pydantic import BaseModel

from envs.errors import RecipeError
from envs.files import atomic_write_text
from envs.net import LOOPBACK, free_port
from envs.tokens import ensure_token_file, read_token_file
from tasks.artifacts import log
from tasks.cluster import ClusterTarget
from trainer.cluster.engine_job import FleetSpec, FleetState
from trainer.cluster.jobs import ACTIVE, JobCommand, JobsError
from trainer.vllm.remote import EngineKind, RemoteEngines, ties_embeddings, untied_copy
from trainer.vllm.server import VllmServer, healthy

ENGINE_MODULE = "trainer.cluster.engine_job"
RECORD_FILE, SPEC_FILE, SERVED_MODEL = "fleet.json", "spec.json", "served-model"
POLL_S = 2.0
REACH_TIMEOUT_S = 60.0
_LOCAL: dict[Path, tuple[str, list[VllmServer]]] = {}
"""Servers started by this process, by fleet folder: (spec digest, servers)."""


class FleetError(RecipeError, RuntimeError):
    """The engines could not be started or reached; the message says which and how to look."""


class FleetRecord(BaseModel):
    job_id: str
    digest: str
    starts: int


class VllmFleet:
    """See the module docstring; the fleet's records live beside ``spec.state_file`` (its folder is the fleet's)."""

    def __init__(self, spec: FleetSpec, cluster: ClusterTarget | None = None) -> None:
        self.spec, self.cluster, self.root = spec, cluster, spec.state_file.parent
        timeouts = {"start_timeout_s", "placement_timeout_s"}  # how long to wait is no launch setting
        fields = self.spec.model_dump(mode="json", exclude={"state_file", "logs_dir", *timeouts})
        self.digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
        # A tied model is served untied (trainer.vllm.remote: vLLM's in-place reload would keep its old head).
        self.base, self.untied_head = Path(spec.model), ties_embeddings(Path(spec.model))
        if self.untied_head:
            self.spec = spec.model_copy(update={"model": str(self.root / SERVED_MODEL)})

    def engines(self, staging: Path) -> RemoteEngines:
        """The fleet's engines (started or reattached), with ``staging`` as their weights folder."""
        ensure_token_file(self.spec.token_file)
        urls = self._cluster_urls() if self.cluster is not None else self._local_urls()
        return RemoteEngines(
            urls=tuple(urls),
            model=self.spec.served_model_name,
            kind=EngineKind.VLLM,
            staging_dir=staging.resolve(),
            untied_head=self.untied_head,
            token_file=self.spec.token_file.resolve(),
        )

    def _prepare(self) -> None:
        """What the engines load before they start: the untied copy of a tied base (written once per base)."""
        if self.untied_head:
            untied_copy(self.base, Path(self.spec.model))

    # --- here ---------------------------------------------------------------------------------------------------

    def _local_urls(self) -> list[str]:
        found = _LOCAL.get(self.root)
        if found is not None and found[0] == self.digest and all(server.alive() for server in found[1]):
            return [server.base_url for server in found[1]]
        self.stop()
        self._prepare()
        servers = []
        try:
            for index in range(self.spec.engines):
                log("starting vLLM engine %d of %d serving %s here", index + 1, self.spec.engines, self.spec.model)
                host = self.spec.host or LOOPBACK
                launch = self.spec.launch(host, free_port(host), index)
                server = VllmServer(launch, self.spec.logs_dir / f"engine-{index}.log", self.spec.start_timeout_s)
                server.start()
                servers.append(server)
                log("engine %d answers on %s after %.0f s", index, server.base_url, server.start_s or 0)
        except BaseException:
            for server in servers:
                server.stop()
            raise
        _LOCAL[self.root] = (self.digest, servers)
        return [server.base_url for server in servers]

    # --- on the cluster -----------------------------------------------------------------------------------------

    def _record(self) -> FleetRecord | None:
        try:
            return FleetRecord.model_validate_json((self.root / RECORD_FILE).read_bytes())
        except (OSError, ValueError):
            return None

    def _cluster_urls(self) -> list[str]:
        assert self.cluster is not None
        jobs = self.cluster.jobs()
        record = self._record()
        if record is not None and record.digest == self.digest and jobs.find(record.job_id) in ACTIVE:
            urls = self._wait_for_state(jobs, record.job_id)
            token = read_token_file(self.spec.token_file)
            if all(healthy(url, token) for url in urls):
                log("engines of job %s serve on %s: reattached", record.job_id, ", ".join(urls))
                return urls
        if record is not None:
            jobs.stop(record.job_id)  # ended, changed or sick: a fresh fleet
        starts = (record.starts if record else 0) + 1
        job_id = f"rl-recipe-{self.cluster.run_id}-engines-{starts}"
        self.spec.state_file.unlink(missing_ok=True)
        self._prepare()
        self.spec.write(self.root / SPEC_FILE)
        command = JobCommand(ENGINE_MODULE, [str(self.root / SPEC_FILE)], self.cluster.python)
        jobs.submit(command, submission_id=job_id, metadata={"run": self.cluster.run_id, "role": "engines"})
        record = FleetRecord(job_id=job_id, digest=self.digest, starts=starts)
        atomic_write_text(self.root / RECORD_FILE, record.model_dump_json())
        log("engine job %s submitted: %d engine(s) serving %s", job_id, self.spec.engines, self.spec.model)
        urls = self._wait_for_state(jobs, job_id)
        self._wait_reachable(urls)
        return urls

    def _wait_reachable(self, urls: list[str]) -> None:
        """Until every engine answers from here too (a cluster in a namespace of its own reaches this machine through
        its bridge, which mirrors a new port within a second)."""
        token = read_token_file(self.spec.token_file)
        deadline = time.monotonic() + REACH_TIMEOUT_S
        while not all(healthy(url, token) for url in urls):
            if time.monotonic() > deadline:
                raise FleetError(
                    f"the engines serve on the cluster but {', '.join(urls)} do not answer here within "
                    f"{REACH_TIMEOUT_S:g} s (a cluster in a network namespace: is its bridge running? see "
                    f"{self.spec.logs_dir} and the cluster's bridge.log)"
                )
            time.sleep(POLL_S / 4)

    def _wait_for_state(self, jobs, job_id: str) -> list[str]:  # type: ignore[no-untyped-def]
        """The URLs the engine job reports once every engine serves; a job that ends first is an error."""
        deadline = time.monotonic() + self.spec.placement_timeout_s + self.spec.start_timeout_s + 120
        while True:
            try:
                return FleetState.model_validate_json(self.spec.state_file.read_bytes()).urls
            except (OSError, ValueError):
                pass
            status = jobs.find(job_id)
            if status not in ACTIVE or time.monotonic() > deadline:
                tail = _tail(jobs, job_id)
                raise FleetError(
                    f"engine job {job_id} is {status or 'unknown'} and reported no engines"
                    + (" within its start timeout" if status in ACTIVE else "")
                    + f" (engine logs: {self.spec.logs_dir}); its log ends:\n{tail}"
                )
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Stop the fleet (here: the server processes; on the cluster: the engine job)."""
        stop_fleet(self.root, self.cluster)


def stop_fleet(root: Path, cluster: ClusterTarget | None) -> None:
    """Stop the fleet whose folder is ``root``: servers this process started, and the engine job it records."""
    _, servers = _LOCAL.pop(root.resolve(), ("", []))
    for server in servers:
        server.stop()
    try:
        record = FleetRecord.model_validate_json((root / RECORD_FILE).read_bytes())
    except (OSError, ValueError):
        return
    if cluster is not None:
        jobs = cluster.jobs()
        if jobs.find(record.job_id) in ACTIVE:
            jobs.stop(record.job_id)
            log("stopped engine job %s", record.job_id)


def _tail(jobs, job_id: str) -> str:  # type: ignore[no-untyped-def]
    try:
        return jobs.logs(job_id)[-3000:]
    except JobsError as error:
        return f"(no log: {error})"
