"""What a stage publishes to an experiment tracker, and what a tracker backend is.

A ``Publication`` is plain data built from the run's record (``tasks.tracking.record``): metric points keyed under the
stage's prefix (``hero/train/hero/reward_mean`` at step 7), tables (a sample of trajectories), and one line of summary.
A backend (``Tracker``) turns it into its own calls; the registry ``tasks.tracking.trackers.TRACKERS`` maps each
``TrackerName`` to its class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from envs.errors import RecipeError


class TrackerName(StrEnum):
    TENSORBOARD = "tensorboard"
    MLFLOW = "mlflow"
    WANDB = "wandb"


class TrackingSettings(BaseModel):
    """The profile's ``tracking`` section: where a run's metrics and trajectory tables also go (default: nowhere but the
    run folder, which stays the record)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    backends: tuple[TrackerName, ...] = ()
    mlflow_uri: str | None = None
    """An MLflow tracking server (``recipe tracking up`` starts one on loopback); None: a SQLite store in the run
    folder (``tracking/mlflow.db``; ``mlflow ui --backend-store-uri sqlite:///…`` opens it)."""
    mlflow_experiment: str = Field("rl-recipe", min_length=1, max_length=200)
    wandb_project: str = Field("rl-recipe", min_length=1, max_length=128)
    """W&B runs are written offline under the run folder (``tracking/wandb``); ``wandb sync`` uploads them later."""
    trajectories_per_stage: int = Field(24, ge=0, le=10_000)
    """Trajectories per stage in its table (hero and transfer: base-vs-trained pairs of the same tasks)."""
    timeout_s: float = Field(30.0, gt=0, le=3600)
    """How long one tracker may take to publish one stage before the stage goes on without it (a warning)."""


class TrackingError(RecipeError, RuntimeError):
    """A tracker could not take a publication; the stage goes on (the run folder is the record)."""


@dataclass(frozen=True)
class Point:
    key: str
    value: float
    step: int = 0


@dataclass(frozen=True)
class Table:
    key: str
    """Where it goes (``hero/trajectories``)."""
    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True)
class Publication:
    """One stage's record for the trackers."""

    stage: str
    points: list[Point]
    tables: list[Table] = field(default_factory=list)
    summary: str = ""


@dataclass(frozen=True)
class TrackerRun:
    """The pipeline run a tracker run stands for."""

    run_id: str
    """The pipeline run's id (the tracker run's name)."""
    folder: Path
    """Where a backend keeps local files (``<run>/tracking``)."""
    tags: dict[str, str]
    """Run id, profile, config hash, commit."""
    config: dict[str, Any]


class Tracker(Protocol):
    """One backend. ``start`` creates the tracker run, or continues the one whose id it was given (a resumed
    pipeline); the id it returns is kept in the run folder."""

    name: ClassVar[TrackerName]

    def __init__(self, settings: TrackingSettings) -> None: ...

    @staticmethod
    def describe(settings: TrackingSettings) -> str:
        """Where it keeps the run, in a few words (the dry run's plan)."""
        ...

    def start(self, run: TrackerRun, tracker_id: str | None) -> str: ...

    def publish(self, publication: Publication) -> None: ...

    def finish(self, passed: bool) -> None:
        """The pipeline ended here (its last stage passed, or a gate failed)."""
        ...

    def link(self) -> str:
        """Where a person opens the tracker run (a URL, or a path and the command that shows it)."""
        ...

    def close(self) -> None: ...
