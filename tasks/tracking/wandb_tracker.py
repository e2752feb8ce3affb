"""Weights & Biases, offline: nothing leaves the machine; ``wandb sync <run>/tracking/wandb/offline-run-*`` uploads
the run later, if the user wants it.

One W&B run id per pipeline run: every stage (each in its own ``wandb.init(id=…, resume="allow")``, so a stage in
another process continues the same run) logs its points against its own step axis (``<stage>/step``, declared with
``define_metric``: W&B's global step only grows, and each stage's steps start again at 1). Tables are ``wandb.Table``.
W&B's own folders (cache, staged artifacts, config) are kept under the run folder too: runs never share one.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from typing import Any, ClassVar

from tasks.tracking.contract import Publication, TrackerName, TrackerRun, TrackingSettings


class WandbTracker:
    name: ClassVar[TrackerName] = TrackerName.WANDB

    def __init__(self, settings: TrackingSettings) -> None:
        self.settings = settings
        self.run: Any = None
        self.folder = ""

    @staticmethod
    def describe(settings: TrackingSettings) -> str:
        return f"offline, project {settings.wandb_project}, in <run>/tracking/wandb"

    def start(self, run: TrackerRun, tracker_id: str | None) -> str:
        home = run.folder / "wandb-home"
        for name, sub in (("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data"), ("WANDB_CONFIG_DIR", "config")):
            os.environ[name] = str(home / sub)
        os.environ["WANDB_SILENT"] = "true"
        import wandb

        run.folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            mode="offline",
            dir=run.folder,
            project=self.settings.wandb_project,
            id=tracker_id or uuid.uuid4().hex[:12],
            resume="allow",
            name=run.run_id,
            tags=[run.tags["profile"], run.run_id[:64]],
            config=run.config | {"tags": run.tags},
            settings=wandb.Settings(console="off", x_disable_stats=True),
            reinit="create_new",
        )
        self.folder = str(run.folder / "wandb")
        return str(self.run.id)

    def publish(self, publication: Publication) -> None:
        import wandb

        axis = f"{publication.stage}/step"
        self.run.define_metric(axis)
        self.run.define_metric(f"{publication.stage}/*", step_metric=axis)
        by_step: dict[int, dict[str, float]] = defaultdict(dict)
        for point in publication.points:
            by_step[point.step][point.key] = point.value
        for step in sorted(by_step):
            self.run.log({axis: step, **by_step[step]})
        for table in publication.tables:
            self.run.log({table.key: wandb.Table(columns=list(table.columns), data=[list(r) for r in table.rows])})
        self.run.summary[f"{publication.stage}/gate"] = publication.summary

    def finish(self, passed: bool) -> None:
        self.run.summary["pipeline"] = "passed" if passed else "failed"

    def link(self) -> str:
        return f"{self.folder} (offline; upload with: wandb sync {self.folder}/offline-run-*)"

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
