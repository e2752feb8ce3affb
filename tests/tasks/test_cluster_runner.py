"""The Ray Job runner's decisions against a scripted dashboard that plays the job (writing its shards as a real job
would): submit and ingest every step once, reattach to a live job instead of resubmitting, ingest a job that finished
while nobody watched, resubmit a failed one from its checkpoint, give up after the allowed submissions with the log's
tail, and stop the job when the flow run is cancelled. The same path against a real Ray cluster:
``tests/integration/test_cluster.py``."""

import json
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from envs.loaders import load_jsonl
from envs.types import AnswerEquals, Domain, Split, StopReason, TaskSpec, Tier, Trajectory
from tasks import cluster
from tasks.catalog import Catalog
from tasks.cluster import ClusterTarget, JobCancelled, JobFailed, JobRecord, RayJobRunner
from tasks.context import StageScope
from tasks.training import TrainJob
from trainer.cluster.jobs import RayJobs
from trainer.cluster.shards import ShardWriter
from trainer.cluster.train_job import TrainJobSpec
from trainer.loops import LoopHistory, StepRecord, SyncLoopConfig, TaskFilter
from trainer.vllm.remote import RemoteEngines

STEPS = 3


class Ledger:
    """The stage manifest's job records, in memory."""

    def __init__(self) -> None:
        self.jobs: dict[str, JobRecord] = {}

    def job(self, key: str) -> JobRecord | None:
        return self.jobs.get(key)

    def record_job(self, key: str, record: JobRecord) -> None:
        self.jobs[key] = record


class PlayedJobs:
    """A dashboard whose jobs run the loop of their spec: one step per status read, shards and checkpoints written;
    ``fail_at`` makes the first submission die after that step, ``running`` jobs exist before the runner looks."""

    def __init__(self, fail_at: int | None = None, always_fail: bool = False) -> None:
        self.fail_at, self.always_fail = fail_at, always_fail
        self.jobs: dict[str, dict] = {}
        self.submissions: list[str] = []
        self.stopped: list[str] = []

    def start(self, job_id: str, spec_path: Path, status: str = "RUNNING", step: int = 0) -> None:
        self.jobs[job_id] = {"spec": TrainJobSpec.read(spec_path), "step": step, "status": status, "log": ""}

    def advance(self, job: dict) -> None:
        spec: TrainJobSpec = job["spec"]
        if job["status"] != "RUNNING":
            return
        first_submission = len(self.submissions) == 1
        if self.always_fail or (job["step"] == self.fail_at and first_submission):
            job["status"], job["log"] = "FAILED", job["log"] + "Traceback: the node went away\n"
            return
        job["step"] += 1
        step = job["step"]
        writer = ShardWriter(spec.shards)
        writer.rollouts(step, [rollout(task.task_id, step) for task in load_jsonl(spec.tasks_file)])
        writer.step(record(step))
        job["log"] += f"[job {spec.label}] step {step}: reward 0.5\n"
        (spec.out_dir / "checkpoints" / f"step-{step:06d}" / "policy").mkdir(parents=True, exist_ok=True)
        history = LoopHistory(kind="sync", steps=[record(s) for s in range(1, step + 1)])
        history.save(spec.out_dir)
        if step == spec.loop_config().steps:
            job["status"] = "SUCCEEDED"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.startswith("/api/packages/"):
            return httpx.Response(200, json={})
        if path == "/api/jobs/" and request.method == "POST":
            body = json.loads(request.content)
            job_id = body["submission_id"]
            self.submissions.append(job_id)
            self.start(job_id, Path(body["entrypoint"].split()[-1]))
            return httpx.Response(200, json={"submission_id": job_id})
        job_id = path.split("/")[3]
        if job_id not in self.jobs:
            return httpx.Response(404, text=f"Job {job_id} does not exist")
        job = self.jobs[job_id]
        if path.endswith("/logs"):
            return httpx.Response(200, json={"logs": job["log"]})
        if path.endswith("/stop"):
            self.stopped.append(job_id)
            job["status"] = "STOPPED"
            return httpx.Response(200, json={"stopped": True})
        self.advance(job)
        return httpx.Response(200, json={"status": job["status"]})


def record(step: int) -> StepRecord:
    shape = {"pass_rate": 0.0, "trajectories": 2, "groups_dropped": 0, "trained": True}
    return StepRecord(step=step, wall_s=float(step), reward_mean=0.5, **shape)


def rollout(task: str, step: int) -> Trajectory:
    sampled = {"tokens": [1, 2, 3], "loss_mask": [0, 1, 1], "logprobs": [0.0, -0.5, -0.25], "prompt_len": 1}
    return Trajectory(task_id=task, group_id=f"s{step}", reward=1.0, stop_reason=StopReason.STOP, **sampled)


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    where = {"world_id": "w", "domain": Domain.GENERAL, "tier": Tier.TOY, "split": Split.TRAIN}
    tasks = [TaskSpec(task_id=f"t{i}", prompt="p", rubric=[AnswerEquals(expected="x")], **where) for i in range(2)]
    run = tmp_path / "run"
    scope = StageScope(Catalog(tmp_path / "catalog.duckdb"), "overfit", "4-overfit", tmp_path / "worlds")
    loop = SyncLoopConfig(steps=STEPS, prompts_per_step=2, samples_per_prompt=2, tasks=TaskFilter(ids=("t0", "t1")))
    job = TrainJob("overfit", tmp_path / "policy", tasks, loop, run / "4-overfit" / "train-overfit-abc")
    target = ClusterTarget(address="http://head:8265", root=run, run_id="r1", max_job_attempts=2)
    played = PlayedJobs()
    monkeypatch.setattr(
        ClusterTarget, "jobs", lambda self: RayJobs(self.address, transport=httpx.MockTransport(played))
    )
    monkeypatch.setattr("trainer.cluster.jobs.POLL_S", 0.0)
    return scope, job, target, played


def steps_in(catalog: Catalog) -> list[tuple[int, int]]:
    rows = catalog.query("SELECT step, count(*) AS n FROM trajectories GROUP BY step ORDER BY step")
    counted = [(r["step"], r["n"]) for r in rows]
    assert [r["step"] for r in catalog.query("SELECT step FROM train_steps ORDER BY step")] == [s for s, _ in counted]
    return counted


def test_a_job_is_submitted_followed_and_every_step_ingested_once(setup) -> None:
    scope, job, target, played = setup
    ledger = Ledger()
    result = RayJobRunner(target, ledger)(scope, job)
    assert played.submissions == ["rl-recipe-r1-4-overfit-train-overfit-abc-1"]
    assert steps_in(scope.catalog) == [(1, 2), (2, 2), (3, 2)]
    assert [r.step for r in result.history.steps] == [1, 2, 3]
    assert result.policy == target.root / "4-overfit" / "train-overfit-abc" / "checkpoints" / "step-000003" / "policy"
    assert ledger.jobs["train-overfit-abc"] == JobRecord(
        job_id=played.submissions[0], submissions=1, status="SUCCEEDED"
    )
    spec = TrainJobSpec.read(target.root / "4-overfit" / "train-overfit-abc" / "spec.json")
    assert spec.shards.is_absolute() and spec.loop_config() == job.loop


@pytest.mark.parametrize(("status", "step"), [("RUNNING", 1), ("SUCCEEDED", STEPS)])
def test_a_recorded_job_that_lives_or_finished_is_followed_not_resubmitted(setup, status: str, step: int) -> None:
    scope, job, target, played = setup
    runner, ledger = RayJobRunner(target, Ledger()), Ledger()
    runner.ledger = ledger
    spec = runner.spec(scope, job)
    played.start("earlier-1", spec.out_dir / "spec.json", status="RUNNING")
    for _ in range(step):  # the job ran while the flow was gone
        played.advance(played.jobs["earlier-1"])
    played.jobs["earlier-1"]["status"] = status
    ledger.record_job("train-overfit-abc", JobRecord(job_id="earlier-1", submissions=1))
    runner(scope, job)
    assert played.submissions == []  # one job, not two
    assert steps_in(scope.catalog) == [(1, 2), (2, 2), (3, 2)]


def test_a_failed_job_is_resubmitted_and_its_steps_replaced_not_duplicated(setup) -> None:
    scope, job, target, played = setup
    played.fail_at = 2
    ledger = Ledger()
    RayJobRunner(target, ledger)(scope, job)
    assert [s[-1] for s in played.submissions] == ["1", "2"]
    assert steps_in(scope.catalog) == [(1, 2), (2, 2), (3, 2)]
    assert ledger.jobs["train-overfit-abc"].submissions == 2


def test_a_failed_job_is_resubmitted_on_the_engines_its_stage_has_now(setup, tmp_path: Path) -> None:
    """The run's fleet restarted elsewhere after an engine's node died: the resubmission generates on the new URLs."""
    scope, job, target, played = setup
    played.fail_at = 1
    dead, fresh = (
        RemoteEngines(urls=(url,), model="policy", staging_dir=tmp_path / "weights")
        for url in ("http://10.0.0.7:8000", "http://10.0.0.9:8000")
    )
    asked: list[int] = []
    job = replace(
        job, loop=job.loop.model_copy(update={"engines": dead}), current_engines=lambda: asked.append(1) or fresh
    )
    RayJobRunner(target, Ledger())(scope, job)
    first, second = (played.jobs[job_id]["spec"].loop_config().engines for job_id in played.submissions)
    assert (first, second, len(asked)) == (dead, fresh, 1)  # asked once: before the one resubmission
    assert steps_in(scope.catalog) == [(1, 2), (2, 2), (3, 2)]


def test_a_job_that_keeps_failing_ends_the_stage_with_its_log(setup) -> None:
    scope, job, target, played = setup
    played.always_fail = True
    with pytest.raises(JobFailed, match=r"(?s)ended FAILED after 2 submission\(s\).*the node went away"):
        RayJobRunner(target, Ledger())(scope, job)
    assert len(played.submissions) == 2


def test_a_cancelled_flow_run_stops_its_job(setup, monkeypatch: pytest.MonkeyPatch) -> None:
    scope, job, target, played = setup
    monkeypatch.setattr(cluster, "CANCEL_CHECK_S", 0.0)
    monkeypatch.setattr(cluster, "_cancel_requested", lambda: True)
    with pytest.raises(JobCancelled, match="stopped"):
        RayJobRunner(target, Ledger())(scope, job)
    assert played.stopped == played.submissions
