"""Build the environment content: every world and the task sets, written under one data folder.

Layout of one build (``build_environment(out)``)::

    out/worlds/<world_id>/{filesystem,apps_data}/   pristine, read-only snapshots
    out/tasks/train.jsonl, out/tasks/heldout.jsonl  TaskSpec per line
    out/manifest.json                               seed, counts, content digest, timing
    out/.rl-recipe-data                             the marker: rl-recipe made this folder

Runs share builds, never a mutable folder: ``environment_build(root, seed, worlds_per_domain)`` gives the build for
those inputs under a data root, ``root/env-<key>/`` with ``key`` a digest of every input (``build_key``). It is built
once, in a private staging folder, and published by one rename under a lock (``root/.lock``), so two runs that want
it at once build it once (the staging folders a killed build left are swept under that lock); a build that exists is
checked against its manifest's content digest before it is reused (a damaged one is moved aside, not rebuilt in place
under a reader). A root given as a build itself (``recipe envs generate --out DIR``, a test's folder) is used as it
is when it holds a matching, intact build. Nothing is written into a folder rl-recipe did not make
(``envs.files.claim_folder``): a user's folder named as the data root, or as ``--out``, is refused with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ValidationError

from envs.errors import RecipeError
from envs.files import claim_folder, file_lock, replace_dir, tree_digest
from envs.loaders import load_jsonl, save_jsonl
from envs.options import DEFAULT_WORLDS_PER_DOMAIN
from envs.types import Split, TaskSpec

BUILD_VERSION = "env-v1"
"""Part of every build's key: bump it when a generator's output changes."""
MARKER = ".rl-recipe-data"
LOCK_TIMEOUT_S = 3600.0


class EnvironmentBuildError(RecipeError, OSError):
    """The environment cannot be written where asked (a path that cannot be a folder, no permission, no space)."""


class NoTaskSetError(RecipeError, FileNotFoundError):
    """A folder given as a data folder holds no task set."""


class EnvironmentManifest(BaseModel):
    seed: int
    worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN
    world_ids: list[str]
    task_counts: dict[str, int]
    content_digest: str  # sha256 over every generated file (path and bytes): equal digests, equal environments
    generation_seconds: float
    source: str | None = None
    """None for the generated worlds; ``file:<environment file>`` for a team's own environment (``envs.byo``)."""


def content_digest(root: Path) -> str:
    """sha256 over the relative path and bytes of every file under ``root``/worlds and ``root``/tasks, in path order.

    Generation is byte-identical per seed, so this is the key for anything derived from an environment (the base
    model's cache); the manifest's timing field is not part of it.
    """
    return tree_digest(root, (p for folder in ("worlds", "tasks") for p in (root / folder).rglob("*") if p.is_file()))


def build_environment(
    out: Path, seed: int = 0, worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN
) -> EnvironmentManifest:
    """Generate all worlds and tasks into ``out`` (a new or empty folder, or one rl-recipe made: ``claim_folder``),
    swapped in whole; return the manifest. Worlds past the third of each domain are train worlds: more of them, more
    varied tasks to train on."""
    out = Path(os.path.abspath(out))  # `.` has no name to stage beside; its absolute form does
    if Path.cwd().is_relative_to(out):
        raise EnvironmentBuildError(
            f"{out} is the folder you are in: it is replaced whole when built, which would leave your shell in a "
            "deleted folder; pass a new folder inside it (--out data) or run from another folder"
        )
    try:
        claim_folder(out, MARKER, ours=load_manifest(out) is not None)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.building-"))
    except RecipeError:
        raise
    except OSError as error:
        raise EnvironmentBuildError(f"cannot build the environment in {out}: {error.strerror or error}") from None
    try:
        manifest = _generate(staging, seed, worlds_per_domain)
        # Swap the finished folder in whole: a crash mid-generation never leaves a half-written data folder.
        replace_dir(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def _generate(folder: Path, seed: int, worlds_per_domain: int) -> EnvironmentManifest:
    started = time.perf_counter()
    # The generators load here, not with the module: reading a build's manifest (preflight) must stay light.
    from envs.taskgen import generate_tasks
    from envs.worlds import generate_worlds, world_ids

    facts = generate_worlds(folder / "worlds", seed=seed, world_ids=world_ids(worlds_per_domain))
    tasks = generate_tasks(facts)
    for split in Split:
        save_jsonl([task for task in tasks if task.split == split], folder / "tasks" / f"{split}.jsonl")
    counts = Counter(f"{task.domain}/{task.tier}/{task.split}" for task in tasks)
    manifest = EnvironmentManifest(
        seed=seed,
        worlds_per_domain=worlds_per_domain,
        world_ids=sorted(facts),
        task_counts=dict(sorted(counts.items())),
        content_digest=content_digest(folder),
        generation_seconds=round(time.perf_counter() - started, 3),
    )
    (folder / "manifest.json").write_text(manifest.model_dump_json(indent=2))
    (folder / MARKER).touch()
    return manifest


def load_manifest(out: Path) -> EnvironmentManifest | None:
    """The manifest of the environment in ``out``; None when there is none or it predates the current format (the
    folder is generated, so callers rebuild it)."""
    path = out / "manifest.json"
    if not path.is_file():
        return None
    try:
        return EnvironmentManifest.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError, OSError):
        return None


def intact(out: Path, seed: int, worlds_per_domain: int) -> EnvironmentManifest | None:
    """``out``'s manifest when it is a build for these inputs whose files still hash to its content digest."""
    manifest = load_manifest(out)
    if manifest is None or manifest.source is not None:
        return None
    if (manifest.seed, manifest.worlds_per_domain) != (seed, worlds_per_domain):
        return None
    return manifest if content_digest(out) == manifest.content_digest else None


def build_key(seed: int, worlds_per_domain: int) -> str:
    """The digest of everything a build depends on (16 hex): equal keys, byte-identical builds."""
    inputs = json.dumps({"version": BUILD_VERSION, "seed": seed, "worlds_per_domain": worlds_per_domain})
    return hashlib.sha256(inputs.encode()).hexdigest()[:16]


def environment_build(root: Path, seed: int = 0, worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN) -> Path:
    """The build for ``seed`` and ``worlds_per_domain`` (module docstring): ``root`` itself when it is an intact
    build of them, else ``root/env-<key>/``, built under the root's lock when missing or damaged."""
    if intact(root, seed, worlds_per_domain):
        return root
    return published_build(
        root,
        f"env-{build_key(seed, worlds_per_domain)}",
        lambda folder: _generate(folder, seed, worlds_per_domain),
        lambda folder: intact(folder, seed, worlds_per_domain) is not None,
    )


def published_build(
    root: Path, name: str, generate: Callable[[Path], object], is_intact: Callable[[Path], bool]
) -> Path:
    """``root/name``: reused when ``is_intact``, else made by ``generate`` in a staging folder and published by one
    rename, under the root's lock (a damaged one is moved aside, never rewritten under a reader)."""
    claim_folder(root, MARKER, ours=load_manifest(root) is not None)
    target = root / name
    with file_lock(root / ".lock", LOCK_TIMEOUT_S):
        # Under the root's lock nobody else builds here: a staging folder left beside the builds is a killed build's.
        for stale in root.glob(".env-*.building-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if is_intact(target):
            return target
        if target.exists():  # damaged: moved aside whole (a reader may hold it), never rewritten in place
            os.replace(target, root / f".{target.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        staging = Path(tempfile.mkdtemp(dir=root, prefix=f".{target.name}.building-"))
        try:
            generate(staging)
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def ensure_environment(
    out: Path, seed: int = 0, worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN
) -> EnvironmentManifest:
    """Reuse ``out`` when it is an intact build of ``seed`` and ``worlds_per_domain``; otherwise build it there."""
    manifest = intact(out, seed, worlds_per_domain)
    return manifest or build_environment(out, seed=seed, worlds_per_domain=worlds_per_domain)


def load_tasks(out: Path, splits: tuple[Split, ...] = (Split.TRAIN, Split.HELDOUT)) -> list[TaskSpec]:
    """The task sets of the build in ``out``; ``NoTaskSetError`` (one line) when it holds none."""
    missing = [split for split in splits if not (out / "tasks" / f"{split}.jsonl").is_file()]
    if missing:
        raise NoTaskSetError(
            f"{out} holds no task set (no tasks/{missing[0]}.jsonl): build one with recipe envs generate --out DIR"
        )
    return [task for split in splits for task in load_jsonl(out / "tasks" / f"{split}.jsonl")]
