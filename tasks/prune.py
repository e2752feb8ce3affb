"""Pruning old runs' checkpoints while keeping their audit trail (``recipe prune``).

Checkpoints are most of a run's bytes, and after the run only a few of them are ever read again. ``prune_runs`` keeps
the newest ``keep_last`` runs of each profile whole and, in the older ones, deletes the checkpoint folders of the
stages' training loops —

    <stage>/<work>/checkpoints/*   our loops (``trainer.loops.policy.CHECKPOINTS``: step-NNNNNNNN/, damaged-…)
    <stage>/<work>/exports/*       a SkyRL job's HF exports (global_step_N/)
    <stage>/<work>/ckpts           a SkyRL job's trainer checkpoints, with the pointer file to its newest one

under the run folder and, for a cluster run with ``cluster.storage``, under ``<storage>/<run_id>`` as well.

Never deleted:

* anything outside the runs root and the cluster's storage root: a run folder or stage folder that is a symbolic link
  is skipped, never followed; a run's folder on storage is ``<storage>/<folder name>`` (never the ``run_id`` its
  ``run.json`` claims) and must be a real folder directly under the resolved storage root;
* a checkpoint that a path recorded under the runs root points into: an output of any stage of any run (the overfit
  and hero stages' final ``policy``, which the transfer stage, a resume and ``recipe eval --run`` read) or a string of
  any run's config (a run whose ``policy.path`` is another run's checkpoint). A relative path protects what it names
  from the run folder, from the checkout the runs root lies in, and from the current folder: whatever folder the
  run was started from, and wherever prune runs, the checkpoint it names is kept;
* anything of a run in progress — a stage whose manifest says ``running`` — or of a run whose manifests cannot be
  read (what they reference is unknown): the run is skipped with the reason;
* everything else: ``run.json``, manifests, gate reports, plots, ``catalog.duckdb``, step histories, eval folders.

Each deleted folder is first renamed aside (``.pruned-<name>``, which no loader takes for a checkpoint), then removed,
so a prune killed half-way never leaves a complete-looking damaged checkpoint. The run's ``pruned.json``
(``PruneLog``) records every prune — when, with which ``keep_last``, each folder and its bytes — and ``recipe audit``
prints it: the checkpoints are gone on purpose. A stage that runs again after a prune finds no checkpoint in its work
folder and trains from its base (the loops resume from the newest checkpoint there is; with none, from step 0); a
cluster job recorded for a pruned work folder is submitted again rather than followed (``pruned_work_folders``).

    for run in prune_runs(Path("runs"), keep_last=3, dry_run=True):
        print(run.run_id, run.freed, run.skipped)
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envs.files import atomic_write_text
from tasks.run_store import STAGE_FOLDER, RunInfo, RunStore, RunStoreError, StageStatus, all_runs, now, read_model

PRUNED_FILE = "pruned.json"
CHECKPOINT_GLOBS = ("*/checkpoints/*", "*/exports/*", "*/ckpts")
"""The checkpoint folders in a stage folder (module docstring). SkyRL's ``ckpts`` goes whole: it holds a pointer file
to its newest checkpoint, which must not outlive the checkpoint."""
ASIDE_PREFIX = ".pruned-"


class PrunedFolder(BaseModel):
    path: str
    """Relative to the run folder; absolute on a cluster's shared storage."""
    bytes: int


class Prune(BaseModel):
    """One ``recipe prune`` of a run."""

    at: str
    keep_last: int
    removed: list[PrunedFolder] = Field(default_factory=list)

    @property
    def freed(self) -> int:
        return sum(f.bytes for f in self.removed)


class PruneLog(BaseModel):
    """``pruned.json``: every prune of the run, oldest first."""

    prunes: list[Prune] = Field(default_factory=list)


def prune_log(store: RunStore) -> PruneLog:
    """The run's prunes (none when it was never pruned); a damaged ``pruned.json`` is a ``RunStoreError``."""
    path = store.root / PRUNED_FILE
    return read_model(path, PruneLog) if path.is_file() else PruneLog()


def pruned_work_folders(store: RunStore, stage_folder: str) -> set[str]:
    """Names of the work folders of ``stage_folder`` that a prune took checkpoints from (their jobs cannot be
    followed to a result any more)."""
    names = set()
    for prune in prune_log(store).prunes:
        for folder in prune.removed:
            parts = Path(folder.path).parts
            for i, part in enumerate(parts[:-2]):
                if part == stage_folder:
                    names.add(parts[i + 1])
    return names


@dataclass
class RunPrune:
    """What a prune did (or, in a dry run, would do) to one run."""

    run_id: str
    profile: str
    removed: list[PrunedFolder] = field(default_factory=list)
    skipped: str | None = None
    """Why the run was left untouched (in progress, unreadable)."""

    @property
    def freed(self) -> int:
        return sum(f.bytes for f in self.removed)


def _real_child(parent: Path, name: str) -> Path | None:
    """``parent/name`` when it is a real folder (no link on the way) directly under the resolved ``parent``."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        return None
    base = parent.resolve()
    child = base / name
    if child.is_symlink() or not child.is_dir() or child.resolve().parent != base:
        return None
    return child


def _roots(info: RunInfo, store: RunStore) -> list[Path]:
    """Where the run's stage folders are: the run folder, and its folder on the cluster's shared storage (named as
    the run's folder is: the ``run_id`` a ``run.json`` claims could be ``../victim``)."""
    roots = [store.root]
    storage = (info.config.get("cluster") or {}).get("storage")
    if isinstance(storage, str) and storage and "\0" not in storage:
        shared = _real_child(Path(storage), store.root.name)
        if shared is not None:
            roots.append(shared)
    return roots


def _linked(path: Path, stage: Path) -> bool:
    """Whether ``path`` or a folder between it and ``stage`` is a symbolic link (a prune never follows one out)."""
    return any(p.is_symlink() for p in (path, *path.parents) if p.is_relative_to(stage))


def checkpoint_folders(roots: list[Path]) -> Iterator[Path]:
    """Every checkpoint folder under the stage folders of ``roots`` (``CHECKPOINT_GLOBS``), none through a link."""
    for root in roots:
        for stage in sorted(root.iterdir()):
            if STAGE_FOLDER.fullmatch(stage.name) and stage.is_dir() and not stage.is_symlink():
                for pattern in CHECKPOINT_GLOBS:
                    yield from (p for p in sorted(stage.glob(pattern)) if p.is_dir() and not _linked(p, stage))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _as_paths(text: str, bases: list[Path]) -> list[Path]:
    """``text`` as a path relative to each of ``bases`` (an absolute one as it is), resolved; none when it cannot
    be a path."""
    if "/" not in text or "\0" in text:
        return []
    return [(base / text).resolve() for base in bases]


def referenced_paths(runs: list[tuple[RunInfo, RunStore]], runs_root: Path) -> set[Path]:
    """Every path the runs record: each stage's outputs and each config's strings that look like paths, relative to
    the run folder, the checkout the runs root lies in and the current folder (module docstring)."""
    found: set[Path] = set()
    checkout = runs_root.resolve().parent
    for info, store in runs:
        bases = [store.root, checkout, Path.cwd()]
        texts = list(_strings(info.config))
        with contextlib.suppress(RunStoreError):  # its outputs are unknown: prune_runs leaves the run itself alone
            texts += [text for m in store.manifests() for text in _strings(m.outputs)]
        found |= {path for text in texts for path in _as_paths(text, bases)}
    return found


def _size(folder: Path) -> int:
    total = 0
    for parent, _, files in os.walk(folder):
        for name in files:
            try:
                total += (Path(parent) / name).lstat().st_size
            except OSError:
                continue  # removed meanwhile
    return total


def _blocker(store: RunStore) -> str | None:
    """Why the run must not be touched: a stage in progress, or manifests that cannot be read."""
    try:
        manifests = store.manifests()
    except RunStoreError as error:
        return f"its records cannot be read ({error}): not touched"
    running = [m for m in manifests if m.status is StageStatus.RUNNING]
    if running:
        m = running[0]
        return (
            f"stage {m.folder} is running (started {m.started_at or '?'}): not touched (if its process was killed, "
            f"recipe run --resume {store.run_id} finishes it first)"
        )
    return None


def _set_aside(folder: Path) -> Path:
    """Rename ``folder`` to ``.pruned-<name>`` (no loader takes it for a checkpoint) before it is deleted: a prune
    killed half-way never leaves half a checkpoint under a checkpoint's name. One set aside by such a prune stays."""
    if folder.name.startswith(ASIDE_PREFIX):
        return folder
    aside = folder.with_name(ASIDE_PREFIX + folder.name)
    os.replace(folder, aside)
    return aside


def _record(store: RunStore, keep_last: int, removed: list[PrunedFolder]) -> None:
    log = prune_log(store)
    log.prunes.append(Prune(at=now(), keep_last=keep_last, removed=removed))
    atomic_write_text(store.root / PRUNED_FILE, log.model_dump_json(indent=2) + "\n")


def _prune_run(info: RunInfo, store: RunStore, protected: set[Path], keep_last: int, dry_run: bool) -> RunPrune:
    """Remove (or list, in a dry run) the run's checkpoint folders no recorded path points into; every folder
    removed is in ``pruned.json`` even when a later one fails."""
    result = RunPrune(info.run_id, info.profile, skipped=_blocker(store))
    if result.skipped:
        return result
    try:
        for folder in checkpoint_folders(_roots(info, store)):
            resolved = folder.resolve()
            if any(path == resolved or path.is_relative_to(resolved) for path in protected):
                continue
            entry = PrunedFolder(path=store.relative(folder), bytes=_size(folder))
            if dry_run:
                result.removed.append(entry)
                continue
            aside = _set_aside(folder)
            result.removed.append(entry)
            shutil.rmtree(aside)
    finally:
        if result.removed and not dry_run:
            _record(store, keep_last, result.removed)
    return result


def prune_runs(
    runs_root: Path, keep_last: int, profile: str | None = None, dry_run: bool = False
) -> tuple[list[RunPrune], dict[str, list[str]]]:
    """Prune the runs under ``runs_root`` (of ``profile``, or of every profile) older than each profile's newest
    ``keep_last`` (module docstring). Returns what was (or would be) removed per pruned run, and the runs kept whole
    per profile."""
    everything = all_runs(runs_root)
    protected = referenced_paths(everything, runs_root)  # a linked run's references count; its folder is not ours
    root = runs_root.resolve()
    runs = [(info, store) for info, store in everything if _real_child(root, store.root.name) is not None]
    by_profile: dict[str, list[tuple[RunInfo, RunStore]]] = {}
    for info, store in runs:
        if profile is None or info.profile == profile:
            by_profile.setdefault(info.profile, []).append((info, store))
    pruned, kept = [], {}
    for name, of_profile in sorted(by_profile.items()):
        cut = max(len(of_profile) - keep_last, 0)
        kept[name] = [info.run_id for info, _ in of_profile[cut:]]
        pruned += [_prune_run(info, store, protected, keep_last, dry_run) for info, store in of_profile[:cut]]
    return pruned, kept
