"""A run's tracker state, ``<run>/tracking/state.json`` (written atomically): per backend the tracker run's id, its
link, and each stage's ending it has taken (``tasks.tracking.publish``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from envs.files import atomic_write_text
from tasks.tracking.contract import TrackerName

FOLDER, STATE_FILE = "tracking", "state.json"


class BackendState(BaseModel):
    tracker_id: str
    link: str = ""
    published: dict[str, str] = Field(default_factory=dict)
    """Stage → the ending it took (``ending``: attempt and finish time)."""
    finished: bool = False


class TrackingState(BaseModel):
    backends: dict[TrackerName, BackendState] = Field(default_factory=dict)


def tracking_folder(run_root: Path) -> Path:
    return run_root / FOLDER


def load_state(run_root: Path) -> TrackingState:
    path = tracking_folder(run_root) / STATE_FILE
    try:
        return TrackingState.model_validate_json(path.read_bytes())
    except (OSError, ValueError):
        return TrackingState()


def links(run_root: Path) -> dict[str, str]:
    """Each backend's link to this run's tracker run (empty when none took it)."""
    return {str(name): entry.link for name, entry in load_state(run_root).backends.items() if entry.link}


def save_state(run_root: Path, state: TrackingState) -> None:
    path = tracking_folder(run_root) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(state.model_dump(mode="json"), indent=1) + "\n")
