"""The smoke chain reporting to all three trackers while things go wrong (``make test-e2e``): a live MLflow server
(``recipe tracking up``'s server), TensorBoard event files and W&B offline.

``recipe run`` is SIGKILLed during the overfit stage and resumed: one tracker run per backend, not two. The MLflow
server is SIGKILLed after the resumed run's overfit stage: the pipeline still passes every gate, with a warning per
stage the server missed; once the server is back, ``recipe tracking publish`` sends what it missed. Then every number
is read back with each tracker's own reader and checked against the stages' gate reports and the catalog.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from envs.net import free_port
from tasks.catalog import Catalog
from tasks.run_store import RunStore
from tasks.tracking.record import metric_key
from tasks.tracking.server import read_server, start_server, stop_server
from tasks.tracking.state import load_state, tracking_folder
from tests.integration.conftest import REPO, wait_for
from tests.tasks.tracking.readers import (
    mlflow_table,
    tensorboard_points,
    tensorboard_run,
    wandb_points,
    wandb_run,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.timeout(1800)]


def recipe(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", *args], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def taken(run: Path, backend: str) -> set[str]:
    entry = load_state(run).backends.get(backend)
    return set(entry.published) if entry else set()


def test_three_trackers_hold_one_run_each_through_a_kill_and_a_dead_server(environment_data, tmp_path) -> None:
    port, server_root, runs = free_port(), tmp_path / "mlflow", tmp_path / "runs"
    url = f"http://127.0.0.1:{port}"
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    settings = [
        f"environment.data={environment_data}",
        "tracking.backends=[tensorboard,mlflow,wandb]",
        f"tracking.mlflow_uri={url}",
        "tracking.timeout_s=20",
    ]
    start_server(server_root, port)
    try:
        first = recipe(["run", "--profile", "smoke", "--runs-root", str(runs), *[f"--set={s}" for s in settings]], env,
                       tmp_path / "first.log")  # fmt: skip
        overfit = wait_for(lambda: next(runs.glob("*/4-overfit/manifest.json"), None), 900, "the overfit stage")
        run = overfit.parent.parent
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
        assert taken(run, "mlflow") >= {"derisk", "tito", "systems"}

        resumed = recipe(["run", "--resume", run.name, "--runs-root", str(runs)], env, tmp_path / "resumed.log")
        wait_for(lambda: "overfit" in taken(run, "mlflow") or resumed.poll() is not None, 900, "overfit published")
        server = read_server(server_root)
        assert server is not None
        os.killpg(int(server.process.split("-")[0]), signal.SIGKILL)  # the tracking server dies mid-run
        assert resumed.wait(timeout=900) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
        log = (tmp_path / "resumed.log").read_text()
        assert "tracker mlflow failed" in log and "the stage goes on" in log
        store = RunStore(run)
        assert [m.status.value for m in store.manifests()] == ["passed"] * 7
        missed = {m.stage for m in store.manifests()} - taken(run, "mlflow")
        assert missed  # the stages that ended while the server was down
        assert taken(run, "tensorboard") == taken(run, "wandb") == {m.stage for m in store.manifests()}

        start_server(server_root, port)  # the same store: the server comes back with what it had
        done = subprocess.run(
            [sys.executable, "-m", "cli", "tracking", "publish", run.name, "--runs-root", str(runs)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert taken(run, "mlflow") == {m.stage for m in store.manifests()}

        expected = {
            metric_key(m.stage, "gate", c["name"]): c["measured"]
            for m in store.manifests()
            for c in (m.gate or {})["criteria"]
            if c["measured"] is not None
        }
        rows = Catalog(store.catalog_path).query("SELECT run, step, reward_mean FROM train_steps WHERE stage = 'hero'")
        [hero_loop] = {r["run"] for r in rows}
        hero_key, hero = (
            metric_key("hero", "train", hero_loop, "reward_mean"),
            {r["step"]: r["reward_mean"] for r in rows},
        )

        client = MlflowClient(url)
        [tracked] = client.search_runs(client.get_experiment_by_name("rl-recipe").experiment_id)  # one, not two
        assert tracked.info.run_name == run.name and tracked.info.status == "FINISHED"
        assert tracked.data.tags["config_hash"] == store.info().config_hash
        assert {k: tracked.data.metrics[k] for k in expected} == pytest.approx(expected)
        curve = {m.step: m.value for m in client.get_metric_history(tracked.info.run_id, hero_key)}
        assert curve == pytest.approx(hero)
        table = mlflow_table(client, tracked.info.run_id, "tables/hero/trajectories.json", tmp_path)
        policies: dict[str, set[str]] = {}
        for row in table:
            policies.setdefault(row["task_id"], set()).add(row["policy"])
        assert policies and all(len(p) == 2 for p in policies.values())  # base and trained, task by task

        events = tensorboard_run(tracking_folder(run) / "tensorboard")
        assert {k: events.Scalars(k)[-1].value for k in expected} == pytest.approx(expected)
        assert tensorboard_points(events, hero_key) == pytest.approx(hero)

        ids, logged, summary = wandb_run(tracking_folder(run))
        assert len(ids) == 1  # the resumed run continued the same W&B run
        latest = {key: value for row in logged for key, value in row.items()}
        assert {k: latest[k] for k in expected} == pytest.approx(expected)
        assert wandb_points(logged, hero_key) == pytest.approx(hero)
        assert summary["pipeline"] == "passed"
        assert json.loads((run / "tracking" / "state.json").read_text())["backends"]["mlflow"]["link"].startswith(url)
    finally:
        stop_server(server_root)
