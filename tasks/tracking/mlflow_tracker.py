"""MLflow: one MLflow run per pipeline run, in the experiment ``tracking.mlflow_experiment``.

Against a tracking server (``tracking.mlflow_uri``; ``recipe tracking up`` starts one on loopback) or, by default, a
SQLite store in the run folder. Metrics go in batches (MLflow takes at most 1,000 per call) at their steps; each
table is a ``log_table`` artifact (``tables/<stage>/trajectories.json``: the UI shows it as a table); the config is
``config.json``. The client's retries are bounded (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, ``…_TIMEOUT``): a server that
is down costs one timeout, not MLflow's default minutes of backoff.
"""

from __future__ import annotations

import os
import time
from typing import Any, ClassVar

from tasks.tracking.contract import Publication, TrackerName, TrackerRun, TrackingSettings

BATCH = 1000
LOCAL_STORE = "mlflow.db"


class MlflowTracker:
    name: ClassVar[TrackerName] = TrackerName.MLFLOW

    def __init__(self, settings: TrackingSettings) -> None:
        self.settings = settings
        self.client: Any = None
        self.uri = self.run_id = self.experiment_id = ""

    @staticmethod
    def describe(settings: TrackingSettings) -> str:
        return settings.mlflow_uri or "a SQLite store in <run>/tracking/mlflow.db"

    def start(self, run: TrackerRun, tracker_id: str | None) -> str:
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(int(self.settings.timeout_s)))
        from mlflow import MlflowClient

        run.folder.mkdir(parents=True, exist_ok=True)
        self.uri = self.settings.mlflow_uri or f"sqlite:///{(run.folder / LOCAL_STORE).resolve()}"
        self.client = MlflowClient(tracking_uri=self.uri)
        if tracker_id is not None:
            found = self.client.get_run(tracker_id)  # raises when the server or store does not know it
            self.run_id, self.experiment_id = tracker_id, found.info.experiment_id
            self.client.update_run(tracker_id, status="RUNNING")
            return tracker_id
        name = self.settings.mlflow_experiment
        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            # A local store keeps its artifacts beside it; a server decides where (its --artifacts-destination).
            where = None if self.settings.mlflow_uri else (run.folder / "mlflow-artifacts").resolve().as_uri()
            self.experiment_id = self.client.create_experiment(name, artifact_location=where)
        else:
            self.experiment_id = experiment.experiment_id
        created = self.client.create_run(self.experiment_id, run_name=run.run_id, tags=run.tags)
        self.run_id = created.info.run_id
        self.client.log_dict(self.run_id, run.config, "config.json")
        return self.run_id

    def publish(self, publication: Publication) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(p.key, p.value, stamp, p.step) for p in publication.points]
        for first in range(0, len(metrics), BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[first : first + BATCH])
        for table in publication.tables:
            columns = {name: [row[i] for row in table.rows] for i, name in enumerate(table.columns)}
            self.client.log_table(self.run_id, data=columns, artifact_file=f"tables/{table.key}.json")
        self.client.set_tag(self.run_id, f"{publication.stage}.gate", publication.summary[:5000])

    def finish(self, passed: bool) -> None:
        self.client.set_terminated(self.run_id, status="FINISHED" if passed else "FAILED")

    def link(self) -> str:
        if self.uri.startswith("http"):
            return f"{self.uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.run_id}"
        return f"mlflow ui --backend-store-uri {self.uri}  (run {self.run_id})"

    def close(self) -> None:
        self.client = None
