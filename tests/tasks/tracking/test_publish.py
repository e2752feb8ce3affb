"""The sample run (``tasks.explorer.sample``: seven stages' gates, training steps, base-vs-trained evals) published to
the three real trackers — MLflow (a SQLite store in the run folder, and a live server), TensorBoard event files, W&B
offline — and read back with each tracker's own reader: the numbers are the gate reports' and the catalog's."""

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient

from envs.net import free_port
from tasks.catalog import Catalog
from tasks.explorer.queries import Explorer
from tasks.explorer.sample import build_sample_run
from tasks.run_store import RunStore
from tasks.tracking import TrackerName, TrackingSettings
from tasks.tracking.publish import publish_run
from tasks.tracking.record import metric_key
from tasks.tracking.server import read_server, start_server, stop_server
from tasks.tracking.state import links, load_state, tracking_folder
from tests.tasks.tracking.readers import (
    mlflow_table,
    tensorboard_points,
    tensorboard_run,
    tensorboard_text,
    wandb_points,
    wandb_run,
)

ALL = (TrackerName.TENSORBOARD, TrackerName.MLFLOW, TrackerName.WANDB)


@pytest.fixture
def run(tmp_path: Path) -> RunStore:
    return build_sample_run(tmp_path / "runs")


def gate_values(store: RunStore) -> dict[str, float]:
    """Every measured criterion of every stage's gate report, by its tracker key."""
    return {
        metric_key(m.stage, "gate", c["name"]): c["measured"]
        for m in store.manifests()
        if m.gate
        for c in m.gate["criteria"]
        if c["measured"] is not None
    }


def hero_rewards(store: RunStore) -> dict[int, float]:
    rows = Catalog(store.catalog_path).query("SELECT step, reward_mean FROM train_steps WHERE stage = 'hero'")
    return {r["step"]: r["reward_mean"] for r in rows}


HERO_REWARD = "hero/train/hero-dppo_prompt_mean_nudge/reward_mean"


def test_every_stage_reaches_all_three_trackers_with_the_reports_numbers(run: RunStore, tmp_path: Path) -> None:
    found = publish_run(run, TrackingSettings(backends=ALL))
    assert set(found) == set(ALL)
    folder, expected = tracking_folder(run.root), gate_values(run)
    assert len(expected) >= 10

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    [mlflow_run] = client.search_runs(client.get_experiment_by_name("rl-recipe").experiment_id)
    assert mlflow_run.info.run_name == run.run_id and mlflow_run.data.tags["profile"] == "sample"
    assert mlflow_run.data.tags["config_hash"] == run.info().config_hash and "commit" in mlflow_run.data.tags
    assert {key: mlflow_run.data.metrics[key] for key in expected} == pytest.approx(expected)
    history = {m.step: m.value for m in client.get_metric_history(mlflow_run.info.run_id, HERO_REWARD)}
    assert history == pytest.approx(hero_rewards(run))
    assert mlflow_run.info.status == "FAILED"  # the sample's transfer stage failed its gate: the pipeline ended
    table = mlflow_table(client, mlflow_run.info.run_id, "tables/hero/trajectories.json", tmp_path)
    pairs: dict[str, set[str]] = {}
    for row in table:
        pairs.setdefault(row["task_id"], set()).add(row["policy"])
    assert len(pairs) >= 2 and all(policies == {"base", "trained"} for policies in pairs.values())  # side by side
    assert all("<|im_start|>user" in row["conversation"] for row in table)  # decoded with the base's tokenizer

    events = tensorboard_run(folder / "tensorboard")
    assert {key: events.Scalars(key)[-1].value for key in expected} == pytest.approx(expected)
    assert tensorboard_points(events, HERO_REWARD) == pytest.approx(hero_rewards(run))
    assert "| source | policy | task_id |" in tensorboard_text(events, "hero/trajectories")

    ids, rows, summary = wandb_run(folder)
    assert len(ids) == 1
    logged = {key: value for row in rows for key, value in row.items()}
    assert {key: logged[key] for key in expected} == pytest.approx(expected)
    assert wandb_points(rows, HERO_REWARD) == pytest.approx(hero_rewards(run))
    [logged_table] = [row for row in rows if row.get("hero/trajectories/_type") == "table-file"]
    table = json.loads(
        next(folder.glob(f"wandb/offline-run-*/files/{logged_table['hero/trajectories/path']}")).read_text()
    )
    assert {row[table["columns"].index("policy")] for row in table["data"]} == {"base", "trained"}
    assert summary["pipeline"] == "failed"


def test_published_stages_are_not_sent_twice_and_a_rerun_stage_is(run: RunStore) -> None:
    settings = TrackingSettings(backends=(TrackerName.MLFLOW,))
    publish_run(run, settings)
    first = load_state(run.root).backends[TrackerName.MLFLOW]
    publish_run(run, settings)  # nothing new: the same run, nothing logged again
    client = MlflowClient(f"sqlite:///{tracking_folder(run.root) / 'mlflow.db'}")
    assert len(client.get_metric_history(first.tracker_id, HERO_REWARD)) == len(hero_rewards(run))
    hero = run.manifest("6-hero")
    run.write_manifest(hero.model_copy(update={"finished_at": "2030-01-01T00:00:00+00:00"}))  # the stage ran again
    publish_run(run, settings)
    assert load_state(run.root).backends[TrackerName.MLFLOW].tracker_id == first.tracker_id  # one tracker run
    assert len(client.get_metric_history(first.tracker_id, HERO_REWARD)) == 2 * len(hero_rewards(run))


def test_a_dead_server_is_a_warning_and_the_run_catches_up_when_it_is_back(
    run: RunStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port, root = free_port(), tmp_path / "server"
    settings = TrackingSettings(backends=(TrackerName.MLFLOW,), mlflow_uri=f"http://127.0.0.1:{port}", timeout_s=10)
    assert publish_run(run, settings) == {}  # no server: nothing taken, no exception
    assert "tracker mlflow failed" in caplog.text and "the run folder stays the record" in caplog.text
    assert TrackerName.MLFLOW not in load_state(run.root).backends
    state = start_server(root, port)
    try:
        assert read_server(root) == state
        found = publish_run(run, settings)
        assert found[TrackerName.MLFLOW].startswith(f"http://127.0.0.1:{port}/#/experiments/")
        client = MlflowClient(state.url)
        [remote] = client.search_runs(client.get_experiment_by_name("rl-recipe").experiment_id)
        assert {k: remote.data.metrics[k] for k in gate_values(run)} == pytest.approx(gate_values(run))
        assert links(run.root) == found
        assert Explorer(run).overview()["trackers"] == found  # the trace explorer's run page links it
    finally:
        assert stop_server(root)
    assert read_server(root) is None and not stop_server(root)
