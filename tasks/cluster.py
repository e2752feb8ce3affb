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
   same folder, on the engines the stage would give it now (``TrainJob.current_engines``: a fleet whose engine's
   node died has started elsewhere) — at most ``max_job_attempts`` submissions in all. Killing the flow's process
   touches no job;
3. **follow**: the job's log goes into the Prefect run line by line; after every poll the shards that changed are
   read into the catalog, a step at a time (``Catalog.delete_step`` first: a resumed job re-ran it), and the progress
   artifact moves;
4. **cancel**: when the Prefect flow run is being cancelled (checked every ``CANCEL_CHECK_S``), the job is stopped
   and the stage ends with ``JobCancelled``.

What the job runs is its ``JobEntry``: our loops and the local trainer (``OUR_LOOPS``: ``trainer.cluster.train_job``,
steps and rollouts as shards, history and checkpoints in the job's folder) or SkyRL's trainer with our generator
(``SkyRLEntry``: ``trainer.skyrl.main`` with the loop rendered as overrides; rollouts as shards from our generator,
steps from SkyRL's metric blocks in the log, the policy from its newest HF export). Nothing else differs.

    runner = RayJobRunner(ClusterTarget(address="http://127.0.0.1:8265", root=run_root, ...), ledger)
    result = train(scope, TrainJob("overfit", base_dir, tasks, loop, out_dir), runner)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from envs.errors import RecipeError
from envs.loaders import save_jsonl
from tasks.artifacts import ProgressArtifact, in_prefect_run, log
from tasks.context import StageScope
from tasks.training import TrainJob, TrainResult, final_policy, step_row, train_source
from trainer.cluster.jobs import ACTIVE, JobCommand, RayJobs
from trainer.cluster.ledger import Claim
from trainer.cluster.shards import ShardReader
from trainer.cluster.train_job import TrainJobSpec
from trainer.loops import AsyncLoopConfig, LoopHistory, StepRecord
from trainer.loops.history import HISTORY_FILE
from trainer.loops.kinds import LoopKind
from trainer.skyrl.metrics import metric_blocks, train_step_rows

TRAIN_MODULE = "trainer.cluster.train_job"
SKYRL_MODULE = "trainer.skyrl.main"
SPEC_FILE = "spec.json"
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
    token_file: Path | None = None
    """The cluster's Ray token (None: Ray's own places, ``trainer.cluster.jobs.ray_token``)."""
    reserve: tuple[Claim, ...] = ()
    """Placement groups each training job holds while it trains (``cluster.megatron_stand_in``)."""
    placement_timeout_s: float = 600.0

    def jobs(self) -> RayJobs:
        return RayJobs(self.address, token_file=self.token_file)

    def job_dir(self, stage_folder: str, work_dir: Path) -> Path:
        return self.root / stage_folder / work_dir.name

    def submission_id(self, stage_folder: str, key: str, submission: int) -> str:
        """Unique per submission: a resubmitted job is a new one, never a second copy of a live one."""
        return f"rl-recipe-{self.run_id}-{stage_folder}-{key}-{submission}"


class JobEntry(Protocol):
    """What a training job runs, and how its steps and result are read back (``OUR_LOOPS``, ``SkyRLEntry``)."""

    def command(self, spec: TrainJobSpec, target: ClusterTarget, stage: str) -> JobCommand: ...

    def log_steps(self, log: str, stage: str, label: str) -> list[dict[str, Any]]:
        """``train_steps`` rows the job's log carries (ours: none, the shards do)."""
        ...

    def result(self, spec: TrainJobSpec, steps: list[dict[str, Any]]) -> TrainResult: ...


class OurLoops:
    """Our loops and the local trainer: ``python -m trainer.cluster.train_job SPEC``."""

    def command(self, spec: TrainJobSpec, target: ClusterTarget, stage: str) -> JobCommand:
        return JobCommand(
            TRAIN_MODULE, [str(spec.out_dir / SPEC_FILE)], target.python, resources=target.trainer_resources
        )

    def log_steps(self, log: str, stage: str, label: str) -> list[dict[str, Any]]:
        return []

    def result(self, spec: TrainJobSpec, steps: list[dict[str, Any]]) -> TrainResult:
        history = LoopHistory.model_validate_json((spec.out_dir / HISTORY_FILE).read_bytes())
        return TrainResult(history, final_policy(spec.out_dir, spec.label))


OUR_LOOPS = OurLoops()


@dataclass(frozen=True)
class SkyRLEntry:
    """SkyRL's trainer with our generator: ``python -m trainer.skyrl.main OVERRIDES`` (``overrides`` renders a loop
    for its stage); our task set, the job's tasks and its shard folder travel as environment variables."""

    overrides: Callable[[TrainJobSpec, str], list[str]]

    def command(self, spec: TrainJobSpec, target: ClusterTarget, stage: str) -> JobCommand:
        env = {
            "RECIPE_DATA_DIR": str(spec.worlds_root.parent),  # the run's environment build
            "RECIPE_TASKS_FILE": str(spec.tasks_file),
            "RECIPE_SHARDS_DIR": str(spec.shards),
        }
        return JobCommand(SKYRL_MODULE, self.overrides(spec, stage), target.python, env, target.trainer_resources)

    def log_steps(self, log: str, stage: str, label: str) -> list[dict[str, Any]]:
        return train_step_rows(metric_blocks(log.splitlines()), stage=stage, run=label)

    def result(self, spec: TrainJobSpec, steps: list[dict[str, Any]]) -> TrainResult:
        exports = sorted(spec.out_dir.glob("exports/global_step_*/policy"), key=lambda p: int(p.parent.name[12:]))
        if not exports or not (exports[-1] / "config.json").is_file():
            raise JobFailed(f"the SkyRL job of {spec.label} exported no policy under {spec.out_dir / 'exports'}")
        empty = {"reward_mean": 0.0, "pass_rate": 0.0, "trajectories": 0, "groups_dropped": 0, "trained": False}
        fields = StepRecord.model_fields
        records = [StepRecord.model_validate(empty | {k: v for k, v in row.items() if k in fields}) for row in steps]
        return TrainResult(LoopHistory(kind="skyrl", steps=records), exports[-1])


class _Ingest:
    """Shards (and the log's step rows) → catalog, a step at a time; moves the progress artifact."""

    def __init__(self, scope: StageScope, job: TrainJob, spec: TrainJobSpec, progress: ProgressArtifact) -> None:
        self.scope, self.job, self.progress = scope, job, progress
        self.reader = ShardReader(spec.shards)
        self.by_id = {t.task_id: t for t in job.tasks}
        self.newest = 0
        self.rows: dict[int, dict[str, Any]] = {}

    def __call__(self, log_rows: list[dict[str, Any]]) -> None:
        stage, label, catalog = self.scope.stage, self.job.label, self.scope.catalog
        source = train_source(label)
        for shards in self.reader.changed():
            catalog.delete_rollouts(stage, source, shards.step)
            catalog.add_trajectories(stage, source, label, shards.trajectories, self.by_id, shards.step)
            if shards.record is not None:
                self._step(step_row(stage, label, shards.record))
        for row in log_rows:
            self._step(row)

    def _step(self, row: dict[str, Any]) -> None:
        if self.rows.get(row["step"]) == row:
            return
        self.scope.catalog.replace_step(row)
        self.rows[row["step"]] = row
        if row["step"] > self.newest:
            self.progress.advance(
                f"step {row['step']}: reward {row.get('reward_mean') or 0:.3f}", row["step"] - self.newest
            )
            self.newest = row["step"]


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

    def __init__(self, target: ClusterTarget, ledger: JobLedger, entry: JobEntry = OUR_LOOPS) -> None:
        self.target, self.ledger, self.entry = target, ledger, entry

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
            reserve=self.target.reserve,
            placement_timeout_s=self.target.placement_timeout_s,
        )
        spec.write(job_dir / SPEC_FILE)
        return spec

    def __call__(self, scope: StageScope, job: TrainJob) -> TrainResult:
        spec = self.spec(scope, job)
        key, label, jobs = job.out_dir.name, job.label, self.target.jobs()
        with ProgressArtifact(scope.folder, f"train-{job.label}", total=job.loop.steps) as progress:
            ingest = _Ingest(scope, job, spec, progress)
            while True:
                record = self._attach_or_submit(jobs, scope, key, spec)
                watch = _Watch(jobs, record.job_id, lambda text: ingest(self.entry.log_steps(text, scope.stage, label)))
                status = jobs.follow(
                    record.job_id, timeout_s=self.target.job_timeout_s, on_log=watch.on_log, on_poll=watch.on_poll
                )
                self.ledger.record_job(key, record.model_copy(update={"status": status}))
                watch.text = jobs.logs_if_any(record.job_id) or watch.text
                watch.ingest(watch.text)
                if status == "SUCCEEDED":
                    break
                tail = watch.text[-LOG_TAIL_CHARS:]
                if status == "TIMEOUT" or record.submissions >= self.target.max_job_attempts:
                    raise JobFailed(
                        f"training job {record.job_id} ended {status} after {record.submissions} submission(s); "
                        f"its log ends:\n{tail}"
                    )
                log(
                    "job %s ended %s; resubmitting from its newest checkpoint; its log ends:\n%s",
                    record.job_id,
                    status,
                    tail,
                )
                job, spec = self._on_current_engines(scope, job, spec)
        return self.entry.result(spec, [ingest.rows[step] for step in sorted(ingest.rows)])

    def _on_current_engines(
        self, scope: StageScope, job: TrainJob, spec: TrainJobSpec
    ) -> tuple[TrainJob, TrainJobSpec]:
        """The job (and its spec, written again) on the engines its stage would give it now: when an engine's node
        died the run's fleet starts again elsewhere (``tasks.fleet``), and a job resubmitted against the dead URLs
        would fail the same way until its attempts ran out."""
        if job.current_engines is None:
            return job, spec
        engines = job.current_engines()
        if engines == job.loop.engines:
            return job, spec
        was = ", ".join(job.loop.engines.urls) if job.loop.engines else "its own engine"
        now = ", ".join(engines.urls) if engines else "its own engine"
        log("the run's engines moved (%s → %s): the resubmitted job generates on the new ones", was, now)
        job = replace(job, loop=job.loop.model_copy(update={"engines": engines}))
        return job, self.spec(scope, job)

    def _attach_or_submit(self, jobs: RayJobs, scope: StageScope, key: str, spec: TrainJobSpec) -> JobRecord:
        """The recorded job when it is still alive or finished well; else a new submission (module docstring)."""
        record = self.ledger.job(key)
        if record is not None:
            status = jobs.find(record.job_id)
            if status in ACTIVE or status == "SUCCEEDED":
                log("job %s is %s: following it (not resubmitting)", record.job_id, status)
                return record
        submissions = (record.submissions if record else 0) + 1
        job_id = self.target.submission_id(scope.folder, key, submissions)
        metadata = {"run": self.target.run_id, "stage": scope.folder, "job": key}
        jobs.submit(self.entry.command(spec, self.target, scope.stage), submission_id=job_id, metadata=metadata)
        record = JobRecord(job_id=job_id, submissions=submissions)
        self.ledger.record_job(key, record)
        log("submitted job %s (submission %d) to %s", job_id, submissions, self.target.address)
        return record


class _Watch:
    """What happens while a job is followed: its log into the Prefect run (and kept whole for the entry's step rows),
    ``ingest`` after every poll, and a stop of the job when the flow run is being cancelled."""

    def __init__(self, jobs: RayJobs, job_id: str, ingest: Callable[[str], None]) -> None:
        self.jobs, self.job_id, self.ingest = jobs, job_id, ingest
        self.text, self.checked = "", time.monotonic()

    def on_log(self, text: str) -> None:
        self.text += text
        for line in text.splitlines():
            if line.strip():
                log("[job] %s", line)

    def on_poll(self) -> None:
        self.ingest(self.text)
        if time.monotonic() - self.checked >= CANCEL_CHECK_S:
            self.checked = time.monotonic()
            if _cancel_requested():
                self.jobs.stop(self.job_id)
                raise JobCancelled(f"the flow run was cancelled: job {self.job_id} stopped")
