"""What every placement shares: its error, the paths a profile names, the Ray cluster's token, the run's shared root."""

from __future__ import annotations

from pathlib import Path

from envs.errors import RecipeError
from flows.config import RecipeConfig
from tasks.run_store import RunStore

REPO_ROOT = Path(__file__).resolve().parents[2]


class PlacementError(RecipeError, ValueError):
    """The profile cannot run where its backends say; the message names what is missing and how to give it."""


def repo_path(value: str) -> str:
    """An interpreter or file named in a profile: a bare command (``python``) or absolute path as given, a relative
    path from the repository root (``.venv-vllm/bin/python``)."""
    path = Path(value)
    if path.is_absolute() or "/" not in value:
        return value
    return str(REPO_ROOT / path)  # not resolved: a venv's interpreter is a symlink that must stay the venv's


def cluster_token_file(config: RecipeConfig) -> Path | None:
    """The Ray cluster's token file: the profile's ``cluster.auth_token_file``, the one ``recipe cluster up`` writes
    for a cluster on this machine, or None (Ray's own places: ``trainer.cluster.jobs.ray_token``)."""
    cluster = config.cluster
    if cluster is None:
        return None
    if cluster.auth_token_file is not None:
        return Path(repo_path(str(cluster.auth_token_file)))
    return REPO_ROOT / ".cluster" / config.profile / "auth_token" if cluster.local is not None else None


def shared_root(config: RecipeConfig, store: RunStore) -> Path:
    """The run's folder on storage the flow and every node reach (the run folder itself without ``storage``)."""
    storage = config.cluster.storage if config.cluster is not None else None
    return (storage / store.run_id).resolve() if storage is not None else store.root.resolve()
