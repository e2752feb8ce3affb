"""Many runs, one team, against a real server (`recipe server`): runs started together from `recipe serve`'s
deployments, and a Prefect worker on the process pool of deployments/prefect.yaml.

Two pipeline runs of the smoke profile with different settings are created together from the ``pipeline`` deployment,
as the UI's Run button does (``POST /deployments/{id}/create_flow_run`` with the form's parameters). Both stop after
the systems stage, the first that trains: each of its trials holds the one slot of the global concurrency limit
``gpu``. The test takes that slot itself until both runs wait for it, so they contend for it from then on. Each run
completes in its own run folder with its own catalog and its own settings in ``run.json``, and the runs' holds of the
slot, read from their logs on the server (each hold's first and last line are written while the slot is held), never
overlap; the server's ``prefect.concurrency-limit`` events show every hold taken and given back.

A backfill of two schedules of the same deployment (smoke, stop after de-risk, each schedule its own parameters): the
server creates both runs in one batch, with UUIDv7 ids that share their first 8 hex digits, what a run id was once
made of; each run completes in its own folder.

`prefect deploy` of deployments/prefect.yaml's pipeline onto the ``rl-recipe`` process pool, then `prefect worker start`
from another folder: a pipeline run submitted to the pool (smoke, stop after de-risk) is picked up by the worker and
completes; the worker stops on SIGINT and leaves nothing running.

All three are ``slow`` (`make test-slow`): 185 s, 136 s and 122 s, 8 min with the server's start (2 cores, 2026-12-01).

    .venv/bin/python -m pytest -m slow tests/integration/test_team_runs.py
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flows.config import RunChanges, load_profile
from tasks.catalog import Catalog
from tasks.run_store import RunStore, StageStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUN_TIMEOUT_S = 600.0
PREFECT = str(Path(sys.executable).parent / "prefect")
POOL = "rl-recipe"
TERMINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
OPENED = re.compile(r"run (?P<run_id>\S+) \((?P<profile>\S+)\) in (?P<folder>.+)")
"""The pipeline's first log line: ``run <id> (<profile>) in <folder>``."""
WAITING, HOLDS, FREES = "waiting for a 'gpu' slot", "holds a 'gpu' slot", "frees its 'gpu' slot"


def create_run(ops, env: dict[str, str], deployment: dict[str, Any], parameters: dict[str, Any]) -> dict[str, Any]:
    """What the UI's Run button calls: a flow run of the deployment with the form's parameters."""
    return ops.api(env, "POST", f"/deployments/{deployment['id']}/create_flow_run", json={"parameters": parameters})


def pipeline_deployment(ops, env: dict[str, str], **where: Any) -> dict[str, Any]:
    body = {"deployments": {"name": {"any_": ["pipeline"]}}} | where
    [deployment] = ops.api(env, "POST", "/deployments/filter", json=body)
    return deployment


def terminal(ops, env: dict[str, str], flow_run_ids: list[str]) -> dict[str, dict[str, Any]]:
    runs = {i: ops.api(env, "GET", f"/flow_runs/{i}") for i in flow_run_ids}
    return {i: run for i, run in runs.items() if run["state"]["type"] in TERMINAL}


def logs(ops, env: dict[str, str], flow_run_ids: list[str]) -> list[dict[str, Any]]:
    """The flow runs' log lines on the server, oldest first."""
    found, offset = [], 0
    while True:
        body = {"logs": {"flow_run_id": {"any_": flow_run_ids}}, "sort": "TIMESTAMP_ASC", "limit": 200}
        page = ops.api(env, "POST", "/logs/filter", json=body | {"offset": offset})
        found += page
        if len(page) < 200:
            return found
        offset += len(page)


def opened_folder(ops, env: dict[str, str], flow_run_id: str) -> Path:
    """The run folder a pipeline flow run opened, from its first log line."""
    [opened] = [m for line in logs(ops, env, [flow_run_id]) if (m := OPENED.fullmatch(line["message"]))]
    return Path(opened["folder"])


def systems_runs(ops, env: dict[str, str]) -> dict[str, str]:
    """The systems stage's flow runs (subflows of the pipeline runs) → the run folder each ran on."""
    runs = ops.api(env, "POST", "/flow_runs/filter", json={"flows": {"name": {"any_": ["systems"]}}})
    return {r["id"]: r["parameters"]["run"] for r in runs}


@contextmanager
def held_gpu_slot(ops, env: dict[str, str]) -> Iterator[None]:
    """The one ``gpu`` slot, held by this test (a lease, as a run takes it) until the block ends."""
    taken = ops.api(
        env,
        "POST",
        "/v2/concurrency_limits/increment-with-lease",
        json={"names": ["gpu"], "slots": 1, "mode": "concurrency", "lease_duration": RUN_TIMEOUT_S},
    )
    try:
        yield
    finally:
        ops.api(env, "POST", "/v2/concurrency_limits/decrement-with-lease", json={"lease_id": taken["lease_id"]})


def holds(lines: list[dict[str, Any]]) -> list[tuple[datetime, datetime, str, str]]:
    """Each hold of the slot in the log lines: (first line, last line, flow run, holder), both lines written while the
    slot was held (``tasks.concurrency.gpu_slot``); a hold whose last line has not reached the server is left out."""
    started: dict[tuple[str, str], datetime] = {}
    found = []
    for line in lines:
        holder, _, message = line["message"].partition(": ")
        key, at = (line["flow_run_id"], holder), datetime.fromisoformat(line["timestamp"])
        if message.startswith(HOLDS):
            started[key] = at
        elif message.startswith(FREES) and key in started:
            found.append((started.pop(key), at, *key))
    return sorted(found)


def most_held_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals open at one instant (one that ends where another starts does not overlap it)."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = now = 0
    for _, change in edges:  # at equal times -1 sorts first: an end before a start
        now += change
        most = max(most, now)
    return most


@pytest.mark.timeout(RUN_TIMEOUT_S * 2)
def test_runs_started_together_from_the_ui_each_get_their_own_folder_and_share_the_gpu_slot(
    prefect_server, ops, environment_data, tmp_path
) -> None:
    env, runs_root = prefect_server, tmp_path / "runs"
    common = {"profile": "smoke", "stop_after": "systems", "runs_root": str(runs_root)}
    data = f"environment.data={environment_data}"
    submitted = {
        "as-profiled": common | {"overrides": [data]},
        "changed": common | {"changes": {"learning_rate": 5e-5, "overfit_steps": 3}, "overrides": [data]},
    }
    with ops.serve(env, "smoke", tmp_path / "serve.log"):
        deployment = pipeline_deployment(ops, env)
        with held_gpu_slot(ops, env):
            flow_runs = {name: create_run(ops, env, deployment, p)["id"] for name, p in submitted.items()}
            ids = list(flow_runs.values())

            def both_wait() -> bool:
                ended = terminal(ops, env, ids)
                assert not ended, f"a run ended before the systems stage: {ended}"
                waiting = {
                    line["flow_run_id"]
                    for line in logs(ops, env, list(systems_runs(ops, env)))
                    if WAITING in line["message"]
                }
                return len(waiting) == len(ids)

            ops.wait_for(both_wait, RUN_TIMEOUT_S, "both runs waiting for the gpu slot", every_s=2.0)
        finished = ops.wait_for(
            lambda: len(done := terminal(ops, env, ids)) == len(ids) and done, RUN_TIMEOUT_S, "both runs", every_s=2.0
        )
    for flow_run_id in ids:
        run = finished[flow_run_id]
        assert run["state"]["type"] == "COMPLETED", run["state"]
        assert run["deployment_id"] == deployment["id"]

    # Each run in its own folder (the one its flow run logged), with its own catalog and its own settings.
    folders = {name: opened_folder(ops, env, flow_run_id) for name, flow_run_id in flow_runs.items()}
    assert len(set(folders.values())) == len(folders)
    assert {p.parent for p in runs_root.glob("*/run.json")} == set(folders.values())
    for name, folder in folders.items():
        store, parameters = RunStore(folder), submitted[name]
        settings = [*RunChanges(**parameters.get("changes", {})).overrides(), *parameters["overrides"]]
        info = store.info()
        config = info.config
        assert info.config_hash == load_profile("smoke", settings).digest(), name
        assert [m.status for m in store.manifests()] == [StageStatus.PASSED] * 3
        trials, steps = store.manifest("3-systems").metrics["trials"], config["stages"]["systems"]["steps_per_trial"]
        assert Catalog(store.catalog_path).count("train_steps", "systems") == trials * steps  # this run's steps only
    assert RunStore(folders["changed"]).info().config["trainer"]["lr"] == 5e-5
    assert RunStore(folders["as-profiled"]).info().config["trainer"]["lr"] == 1e-4

    # The gpu slot: every trial of both runs held it, and never two at once.
    systems = systems_runs(ops, env)
    assert sorted(systems.values()) == sorted(str(f) for f in folders.values())
    expected = sum(RunStore(f).manifest("3-systems").metrics["trials"] for f in folders.values())
    found = ops.wait_for(
        lambda: len(h := holds(logs(ops, env, list(systems)))) == expected and h, 60, "every hold's log lines"
    )
    assert {flow_run for *_, flow_run, _ in found} == set(systems)
    assert most_held_at_once([(start, end) for start, end, *_ in found]) == 1, found
    events = ops.wait_for(lambda: slot_events(ops, env, expected), 60, "the gpu slot's events")
    for phase in ("acquired", "released"):
        by_run = [flow_run for name, flow_run in events if name == f"prefect.concurrency-limit.{phase}"]
        assert sorted(by_run) == sorted(flow_run for *_, flow_run, _ in found), phase


def slot_events(ops, env: dict[str, str], expected: int) -> list[tuple[str, str]] | None:
    """The ``gpu`` limit's acquired / released events: (event name, the flow run that emitted it); None until there
    are ``expected`` of each (the server persists events in batches)."""
    names = ["prefect.concurrency-limit.acquired", "prefect.concurrency-limit.released"]
    page = ops.api(env, "POST", "/events/filter", json={"filter": {"event": {"name": names}}, "limit": 50})
    found = []
    for event in page["events"]:
        if event["resource"].get("prefect.resource.name") != "gpu":
            continue
        [flow_run] = [
            r["prefect.resource.id"].removeprefix("prefect.flow-run.")
            for r in event["related"]
            if r["prefect.resource.role"] == "flow-run"
        ]
        found.append((event["event"], flow_run))
    return found if all(sum(name == n for n, _ in found) == expected for name in names) else None


@pytest.mark.timeout(RUN_TIMEOUT_S * 2)
def test_the_runs_a_schedule_creates_together_each_get_their_own_folder(
    prefect_server, ops, environment_data, tmp_path
) -> None:
    """A backfill: two schedules of the pipeline deployment, each with its own parameters, due a minute ago; the
    server creates their runs in one batch, with UUIDv7 ids whose first 8 hex digits (the time in 16 s steps) are the
    same, the part of the flow run id a run's id was once made of: the second run resumed the first's folder."""
    env, runs_root = prefect_server, tmp_path / "runs"
    common = {"profile": "smoke", "stop_after": "derisk", "runs_root": str(runs_root)}
    data = f"environment.data={environment_data}"
    settings = [common | {"overrides": [data]}, common | {"overrides": [data], "changes": {"learning_rate": 5e-5}}]
    due = datetime.now(UTC) - timedelta(minutes=1)
    with ops.serve(env, "smoke", tmp_path / "serve.log"):
        deployment = pipeline_deployment(ops, env)
        daily = {"interval": 86400, "anchor_date": due.isoformat(), "timezone": "UTC"}
        schedules = ops.api(
            env,
            "POST",
            f"/deployments/{deployment['id']}/schedules",
            json=[{"schedule": daily, "active": True, "parameters": p} for p in settings],
        )
        try:
            window = {"start_time": (due - timedelta(seconds=5)).isoformat(), "end_time": due.isoformat()}
            ops.api(env, "POST", f"/deployments/{deployment['id']}/schedule", json=window | {"max_runs": 1})
            runs = ops.api(env, "POST", "/flow_runs/filter", json={"deployments": {"id": {"any_": [deployment["id"]]}}})
            ids = [r["id"] for r in runs if r["parameters"].get("runs_root") == str(runs_root)]
            assert len(ids) == len(settings), runs
            finished = ops.wait_for(
                lambda: len(done := terminal(ops, env, ids)) == len(ids) and done, RUN_TIMEOUT_S, "both runs", 2.0
            )
        finally:
            for schedule in schedules:
                ops.api(env, "DELETE", f"/deployments/{deployment['id']}/schedules/{schedule['id']}")
    assert [finished[i]["state"]["type"] for i in ids] == ["COMPLETED"] * len(ids), [finished[i]["state"] for i in ids]
    folders = {opened_folder(ops, env, i) for i in ids}
    assert len(folders) == len(ids) and {p.parent for p in runs_root.glob("*/run.json")} == folders
    for folder in folders:
        store = RunStore(folder)
        assert [(m.status, m.attempt) for m in store.manifests()] == [(StageStatus.PASSED, 1)]
        assert Catalog(store.catalog_path).count("trajectories", "derisk") > 0
    lrs = sorted(RunStore(folder).info().config["trainer"]["lr"] for folder in folders)
    assert lrs == [5e-5, 1e-4]


@contextmanager
def worker(ops, env: dict[str, str], folder: Path) -> Iterator[dict[str, Any]]:
    """`prefect worker start --pool rl-recipe`, started in ``folder`` (not the checkout: the deployment's pull step
    finds the code); yields a dict that gets ``clean`` (stopped on SIGINT) and ``killed`` (processes left running)."""
    outcome: dict[str, Any] = {"log": folder / "worker.log"}
    quick = {"PREFECT_WORKER_QUERY_SECONDS": "2", "PYTHONFAULTHANDLER": "1"}  # SIGABRT: its threads into its log
    with outcome["log"].open("w") as out:
        process = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", POOL, "--name", "team-worker", "--limit", "1"],
            env=env | quick | {"PWD": str(folder)},
            cwd=folder,
            stdout=out,
            stderr=out,
            preexec_fn=ops.interruptible,
        )
        try:
            yield outcome
        finally:
            outcome["clean"], outcome["killed"] = ops.stop_tree(process, hung=signal.SIGABRT)


@pytest.mark.timeout(RUN_TIMEOUT_S * 2)
def test_a_worker_on_the_process_pool_runs_a_pipeline_run_submitted_to_it(
    prefect_server, ops, environment_data, tmp_path
) -> None:
    env, runs_root = prefect_server, tmp_path / "runs"
    prefect(env, ops.repo, "work-pool", "create", POOL, "--type", "process", "--overwrite")
    prefect(env, ops.repo, "deploy", "--name", "pipeline", "--prefect-file", "deployments/prefect.yaml")
    deployment = pipeline_deployment(ops, env, work_pools={"name": {"any_": [POOL]}})
    [pull] = deployment["pull_steps"]
    assert pull["prefect.deployments.steps.set_working_directory"]["directory"] == str(ops.repo)
    parameters = {
        "profile": "smoke",
        "overrides": [f"environment.data={environment_data}"],
        "stop_after": "derisk",
        "runs_root": str(runs_root),
    }
    submitted = create_run(ops, env, deployment, parameters)
    assert submitted["work_pool_name"] == POOL and submitted["state"]["type"] == "SCHEDULED"
    started = tmp_path / "worker"
    started.mkdir()
    with worker(ops, env, started) as outcome:
        run = ops.wait_for(
            lambda: terminal(ops, env, [submitted["id"]]).get(submitted["id"]), RUN_TIMEOUT_S, "the pooled run", 2.0
        )
        workers = ops.api(env, "POST", f"/work_pools/{POOL}/workers/filter", json={})
        # Stopped once idle: the run's process reports Completed a moment before it exits (a worker interrupted while
        # a run's process runs waits for it).
        flow_process = int(run["infrastructure_pid"].rsplit(":", 1)[-1])  # set by the worker that started it
        ops.wait_for(lambda: not ops.running([flow_process]), 120, "the flow run's process to exit")
    assert run["state"]["type"] == "COMPLETED", run["state"]
    assert "team-worker" in {w["name"] for w in workers}
    picked = f"Worker 'team-worker' submitting flow run '{submitted['id']}'"
    assert picked in {line["message"] for line in logs(ops, env, [submitted["id"]])}
    assert outcome["clean"] and not outcome["killed"], outcome["log"].read_text()[-6000:]
    [folder] = [p.parent for p in runs_root.glob("*/run.json")]
    assert [m.status for m in RunStore(folder).manifests()] == [StageStatus.PASSED]
    assert Catalog(RunStore(folder).catalog_path).count("trajectories", "derisk") > 0


def prefect(env: dict[str, str], repo: Path, *args: str) -> str:
    """`prefect ARGS` in the checkout, as from a shell there (prefect.yaml's ``{{ $PWD }}`` reads the variable)."""
    done = subprocess.run(
        [PREFECT, "--no-prompt", *args],
        env=env | {"PWD": str(repo)},
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
