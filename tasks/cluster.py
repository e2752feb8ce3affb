"""A stage's training loops as Ray Jobs: submit, follow, ingest, reattach, resubmit, cancel — one path for every job.

``RayJobRunner(target)`` is a ``TrainerRunner`` (``tasks.training``): the stage calls it exactly where the local
backend runs the loop in its own process, and gets the same ``TrainResult`` with the same catalog rows.

1. **where**: the job's folder is ``<shared root>/<stage folder>/<work dir name>`` (``ClusterTarget.job_dir``: the
   run folder itself on a one-machine cluster), holding its spec, its tasks, its checkpoints and history, and its
   shards (``trainer.cluster.shards``);
2. **reattach, not resubmit**: the stage's manifest records each job under the name of its work folder
   (``JobLedger``) as soon as it is submitted. A stage run again (``recipe run --resume``, a Prefect retry) whose job
   is still PENDING or RUNNING follows it; one that SUCCEEDED while nobody watched is ingested; a FAILED or STOPPED
   one (or one the cluster no longer knows) is submitted again — the loop resumes from its newest checkpoint under the
   same folder — at most ``max_job_attempts`` submissions in all. Killing the flow's process touches no job;
3. **follow**: the job's log goes into the Prefect run line by line; after every poll the shards that changed are
   read into the catalog, a step at a time (``Catalog.delete_step`` first: a resumed job re-ran it), and the progress
   artifact moves;
4. **cancel**: when the Prefect flow run is being cancelled (checked every ``CANCEL_CHECK_S``), the job is stopped
   and the stage ends with ``JobCancelled``.

    runner = RayJobRunner(ClusterTarget(address="http://127.0.0.1:8265", root=run_root, ...), ledger)
    result = train(scope, TrainJob("overfit", base_dir, tasks, loop, out_dir), runner)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from envs.errors import RecipeError
from envs.loaders import save_jsonl
from tasks.artifacts import ProgressArtifact, in_prefect_run, log
from tasks.context import StageScope
from tasks.training import TrainJob, TrainResult, final_policy, step_row, train_source
from trainer.cluster.jobs import ACTIVE, JobCommand, RayJobs
from trainer.cluster.shards import ShardReader
from trainer.cluster.train_job import TrainJobSpec
from trainer.loops import AsyncLoopConfig, LoopHistory
from trainer.loops.config import LoopKind
from trainer.loops.history import HISTORY_FILE

TRAIN_MODULE = "trainer.cluster.train_job"
CANCEL_CHECK_S = 10.0
LOG_TAIL_CHARS = 3000


class JobFailed(RecipeError, RuntimeError):
    """A training job failed on every submission allowed; the message carries the last one's log tail."""


class JobCancelled(RuntimeError):
    """The flow run was cancelled while its job ran: the job was stopped."""


class JobRecord(BaseModel):
    """One training job of a stage, as its manifest records it."""

    job_id: str
    submissions: int
    status: str = "PENDING"


class JobLedger(Protocol):
    """Where a stage keeps its jobs across its own restarts (``flows.stage.StageRun`` writes them to the manifest)."""

    def job(self, key: str) -> JobRecord | None: ...

    def record_job(self, key: str, record: JobRecord) -> None: ...


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster a run's jobs go to, and the run's shared root on storage both sides reach."""

    address: str
    """The Ray dashboard (Jobs API), ``http://HEAD:8265``."""
    root: Path
    """This run's shared folder (``<cluster.storage>/<run_id>``, or the run folder on a one-machine cluster)."""
    run_id: str
    python: str = "python"
    trainer_resources: Mapping[str, float] = field(default_factory=dict)
    job_timeout_s: float = 7 * 86400.0
    max_job_attempts: int = 3

    def jobs(self) -> RayJobs:
        return RayJobs(self.address)

    def job_dir(self, stage_folder: str, work_dir: Path) -> Path:
        return self.root / stage_folder / work_dir.name

    def submission_id(self, stage_folder: str, key: str, submission: int) -> str:
        """Unique per submission: a resubmitted job is a new one, never a second copy of a live one."""
        return f"rl-recipe-{self.run_id}-{stage_folder}-{key}-{submission}"


class _Ingest:
    """Shards → catalog, a step at a time; moves the progress artifact to the newest step seen."""

    def __init__(self, scope: StageScope, job: TrainJob, spec: TrainJobSpec, progress: ProgressArtifact) -> None:
        self.scope, self.job, self.progress = scope, job, progress
        self.reader = ShardReader(spec.shards)
        self.by_id = {t.task_id: t for t in job.tasks}
        self.newest = 0

    def __call__(self) -> None:
        stage, label, catalog = self.scope.stage, self.job.label, self.scope.catalog
        for shards in self.reader.changed():
            catalog.delete_step(stage, label, train_source(label), shards.step)
            catalog.add_trajectories(stage, train_source(label), label, shards.trajectories, self.by_id, shards.step)
            if shards.record is not None:
                catalog.append("train_steps", [step_row(stage, label, shards.record)])
                if shards.step > self.newest:
                    note = f"step {shards.step}: reward {shards.record.reward_mean:.3f}"
                    self.progress.advance(note, by=shards.step - self.newest)
                    self.newest = shards.step


def _cancel_requested() -> bool:
    """Whether this Prefect flow run is being cancelled (False outside a run, or when the API does not answer)."""
    if not in_prefect_run():
        return False
    from prefect.client.orchestration import get_client
    from prefect.runtime import flow_run

    run_id = flow_run.get_id()
    if not run_id:
        return False
    try:
        with get_client(sync_client=True) as client:
            state = client.read_flow_run(run_id).state
    except Exception:  # the API is down for a moment: no verdict, the next check asks again
        return False
    return state is not None and state.type.value in ("CANCELLING", "CANCELLED")


class RayJobRunner:
    """A ``TrainerRunner`` that runs the loop as a Ray Job (module docstring)."""

    def __init__(self, target: ClusterTarget, ledger: JobLedger, module: str = TRAIN_MODULE) -> None:
        self.target, self.ledger, self.module = target, ledger, module

    def spec(self, scope: StageScope, job: TrainJob) -> TrainJobSpec:
        """The job's spec, written with its tasks into its folder on shared storage."""
        job_dir = self.target.job_dir(scope.folder, job.out_dir)
        save_jsonl(list(job.tasks), job_dir / "tasks.jsonl")
        loop = job.loop.model_copy(update={"faults": scope.faults}) if scope.faults else job.loop
        spec = TrainJobSpec(
            label=job.label,
            kind=LoopKind.ASYNC if isinstance(loop, AsyncLoopConfig) else LoopKind.SYNC,
            loop=loop.model_dump(mode="json"),
            policy_dir=job.policy_dir.resolve(),
            tasks_file=(job_dir / "tasks.jsonl").resolve(),
            worlds_root=scope.worlds.resolve(),
            out_dir=job_dir.resolve(),
            shards=(job_dir / "shards").resolve(),
        )
        spec.write(job_dir / "spec.json")
        return spec

    def __call__(self, scope: StageScope, job: TrainJob) -> TrainResult:
        spec = self.spec(scope, job)
        key, jobs = job.out_dir.name, self.target.jobs()
        with ProgressArtifact(scope.folder, f"train-{job.label}", total=job.loop.steps) as progress:
            ingest = _Ingest(scope, job, spec, progress)
            while True:
                record = self._attach_or_submit(jobs, scope.folder, key, spec)
                status = self._follow(jobs, record.job_id, ingest)
                self.ledger.record_job(key, record.model_copy(update={"status": status}))
                ingest()
                if status == "SUCCEEDED":
                    break
                tail = jobs.logs(record.job_id)[-LOG_TAIL_CHARS:]
                if status == "TIMEOUT" or record.submissions >= self.target.max_job_attempts:
                    raise JobFailed(
                        f"training job {record.job_id} ended {status} after {record.submissions} submission(s); "
                        f"its log ends:\n{tail}"
                    )
                log("job %s ended %s; resubmitting from its newest checkpoint. Its log ends:\n%s", record.job_id,
                    status, tail)  # fmt: skip
        history = LoopHistory.model_validate_json((spec.out_dir / HISTORY_FILE).read_bytes())
        return TrainResult(history, final_policy(spec.out_dir, job.label))

    def _attach_or_submit(self, jobs: RayJobs, folder: str, key: str, spec: TrainJobSpec) -> JobRecord:
        """The recorded job when it is still alive or finished well; else a new submission (module docstring)."""
        record = self.ledger.job(key)
        if record is not None:
            status = jobs.find(record.job_id)
            if status in ACTIVE or status == "SUCCEEDED":
                log("job %s is %s: following it (not resubmitting)", record.job_id, status)
                return record
        submissions = (record.submissions if record else 0) + 1
        job_id = self.target.submission_id(folder, key, submissions)
        command = JobCommand(
            self.module, [str(spec.out_dir / "spec.json")], self.target.python, resources=self.target.trainer_resources
        )
        metadata = {"run": self.target.run_id, "stage": folder, "job": key}
        jobs.submit(command, submission_id=job_id, metadata=metadata)
        record = JobRecord(job_id=job_id, submissions=submissions)
        self.ledger.record_job(key, record)
        log("submitted job %s (submission %d) to %s", job_id, submissions, self.target.address)
        return record

    def _follow(self, jobs: RayJobs, job_id: str, ingest: _Ingest) -> str:
        last_check = [time.monotonic()]

        def on_poll() -> None:
            ingest()
            if time.monotonic() - last_check[0] >= CANCEL_CHECK_S:
                last_check[0] = time.monotonic()
                if _cancel_requested():
                    jobs.stop(job_id)
                    raise JobCancelled(f"the flow run was cancelled: job {job_id} stopped")

        return jobs.follow(job_id, timeout_s=self.target.job_timeout_s, on_log=_log_lines, on_poll=on_poll)


def _log_lines(text: str) -> None:
    for line in text.splitlines():
        if line.strip():
            log("[job] %s", line)
