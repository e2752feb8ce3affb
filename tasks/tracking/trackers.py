"""The tracker registry: one class per ``TrackerName`` (a new backend is a class and a line here)."""

from __future__ import annotations

from tasks.tracking.contract import Tracker, TrackerName
from tasks.tracking.mlflow_tracker import MlflowTracker
from tasks.tracking.tensorboard_tracker import TensorBoardTracker
from tasks.tracking.wandb_tracker import WandbTracker

TRACKERS: dict[TrackerName, type[Tracker]] = {
    TrackerName.TENSORBOARD: TensorBoardTracker,
    TrackerName.MLFLOW: MlflowTracker,
    TrackerName.WANDB: WandbTracker,
}
