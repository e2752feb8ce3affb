"""Where an eval's tasks come from: ``TaskSource`` and the loader and worlds folder of each ``SourceKind``.

TaskSource(kind=SourceKind.DATA, path=Path("data"), split=Split.HELDOUT, tiers=(Tier.TOY,)).load()   # → list[TaskSpec]
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envs.types import Split, TaskSpec, Tier
from evals.errors import EvalConfigError


class SourceKind(StrEnum):
    DATA = "data"  # our data folder: <path>/tasks/<split>.jsonl, worlds under <path>/worlds
    JSONL = "jsonl"  # a TaskSpec JSONL file; worlds under ``worlds``
    APEX = "apex"  # an APEX-Agents release folder (worlds unzipped into ``worlds``), or a rows file + ``worlds``
    HARBOR = "harbor"  # a folder of Harbor task folders; each task folder is its own world
    BUNDLED_TERMINAL = "bundled-terminal"  # the terminal tasks shipped with envs


class TaskSource(BaseModel):
    """Where the tasks come from; ``path`` is required for every kind except ``bundled-terminal``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: SourceKind
    path: Path | None = None
    split: Split = Split.HELDOUT
    worlds: Path | None = Field(
        None, description="worlds folder for jsonl / apex sources (an APEX release: where its worlds are unzipped)"
    )
    tiers: tuple[Tier, ...] = Field(
        (), description="only tasks of these tiers (none: every tier), applied before ``limit``"
    )
    limit: int | None = Field(None, ge=1, description="only the first N tasks (in source order)")

    @model_validator(mode="after")
    def _path_given(self) -> TaskSource:
        if self.path is None and self.kind is not SourceKind.BUNDLED_TERMINAL:
            raise ValueError(f"task source {self.kind.value!r} needs a path")
        return self

    def load(self) -> list[TaskSpec]:
        tasks = _LOADERS[self.kind](self)
        if not tasks:
            raise EvalConfigError(f"task source {self.kind.value} {self.path} holds no tasks")
        return _of_tiers(tasks, self)[: self.limit]

    @property
    def name(self) -> str:
        """The source as ``--tasks`` names it (a data folder or .jsonl path, ``apex:DIR``, ``harbor:DIR``,
        ``bundled-terminal``), for reports."""
        if self.path is None:
            return self.kind.value
        return str(self.path) if self.kind in (SourceKind.DATA, SourceKind.JSONL) else f"{self.kind.value}:{self.path}"

    def worlds_root(self) -> Path | None:
        """The folder holding ``<world_id>/`` for each task, or None when the source has none."""
        return _WORLDS[self.kind](self)


def _of_tiers(tasks: list[TaskSpec], source: TaskSource) -> list[TaskSpec]:
    """The tasks of ``source.tiers`` (all without a filter); a filter no task passes is an error that says which
    tiers the source holds, since an empty eval would report nothing."""
    if not source.tiers:
        return tasks
    chosen = [task for task in tasks if task.tier in source.tiers]
    if not chosen:
        held = ", ".join(f"{tier} {n}" for tier, n in sorted(Counter(t.tier.value for t in tasks).items()))
        wanted = ", ".join(tier.value for tier in source.tiers)
        raise EvalConfigError(
            f"task source {source.kind.value} {source.path or ''} holds no task of tier {wanted} (it holds: {held})"
        )
    return chosen


def _bundled_terminal(_: TaskSource) -> list[TaskSpec]:
    from envs.harness.terminal import bundled_terminal_tasks

    return list(bundled_terminal_tasks())


def _load_data(source: TaskSource) -> list[TaskSpec]:
    from envs.build import load_tasks

    return load_tasks(_path(source), (source.split,))


APEX_WORLDS_DIR = ".recipe_worlds"
"""Where an APEX release's worlds are unzipped when the source names no worlds folder (inside the release)."""


def _load_apex(source: TaskSource) -> list[TaskSpec]:
    from envs.apex import load_apex, load_apex_release

    path = _path(source)
    return load_apex_release(path) if path.is_dir() else load_apex(path)


def _apex_worlds(source: TaskSource) -> Path | None:
    """A release's worlds, unzipped (or found already built) for the tasks loaded; a rows file's worlds folder."""
    from envs.apex import materialize_worlds

    path = _path(source)
    if not path.is_dir():
        return source.worlds
    return materialize_worlds(path, source.load(), source.worlds or path / APEX_WORLDS_DIR)


def _path(source: TaskSource) -> Path:
    assert source.path is not None  # guaranteed by TaskSource's validator
    return source.path


def _lazy(module: str, name: str) -> Callable[[TaskSource], list[TaskSpec]]:
    def load(source: TaskSource) -> list[TaskSpec]:
        return getattr(importlib.import_module(module), name)(_path(source))

    return load


_LOADERS: dict[SourceKind, Callable[[TaskSource], list[TaskSpec]]] = {
    SourceKind.DATA: _load_data,
    SourceKind.JSONL: _lazy("envs.loaders", "load_jsonl"),
    SourceKind.APEX: _load_apex,
    SourceKind.HARBOR: _lazy("envs.loaders", "load_harbor_dir"),
    SourceKind.BUNDLED_TERMINAL: _bundled_terminal,
}
_WORLDS: dict[SourceKind, Callable[[TaskSource], Path | None]] = {
    SourceKind.DATA: lambda s: _path(s) / "worlds",
    SourceKind.JSONL: lambda s: s.worlds,
    SourceKind.APEX: _apex_worlds,
    SourceKind.HARBOR: _path,  # load_harbor names each task's world after its folder
    SourceKind.BUNDLED_TERMINAL: lambda s: None,
}
