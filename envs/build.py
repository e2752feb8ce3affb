"""Build the environment content: every world and the task sets, written under one data folder.

Layout written by ``build_environment(out)``::

    out/worlds/<world_id>/{filesystem,apps_data}/   pristine, read-only snapshots
    out/tasks/train.jsonl, out/tasks/heldout.jsonl  TaskSpec per line
    out/manifest.json                               seed, counts, content digest, timing
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ValidationError

from envs.files import replace_dir
from envs.loaders import load_jsonl, save_jsonl
from envs.taskgen import generate_tasks
from envs.types import Split, TaskSpec
from envs.worlds import generate_worlds, world_ids
from envs.worlds.generate import DEFAULT_WORLDS_PER_DOMAIN


class EnvironmentManifest(BaseModel):
    seed: int
    worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN
    world_ids: list[str]
    task_counts: dict[str, int]
    content_digest: str  # sha256 over every generated file (path and bytes): equal digests, equal environments
    generation_seconds: float


def content_digest(root: Path) -> str:
    """sha256 over the relative path and bytes of every file under ``root``/worlds and ``root``/tasks, in path order.

    Generation is byte-identical per seed, so this is the key for anything derived from an environment (the base
    model's cache); the manifest's timing field is not part of it.
    """
    digest = hashlib.sha256()
    for path in sorted(p for folder in ("worlds", "tasks") for p in (root / folder).rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def build_environment(
    out: Path, seed: int = 0, worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN
) -> EnvironmentManifest:
    """Generate all worlds and tasks into ``out`` (replacing what was there); return the manifest. Worlds past the
    third of each domain are train worlds: more of them, more varied tasks to train on."""
    started = time.perf_counter()
    staging = out.with_name(out.name + ".building")
    shutil.rmtree(staging, ignore_errors=True)
    facts = generate_worlds(staging / "worlds", seed=seed, world_ids=world_ids(worlds_per_domain))
    tasks = generate_tasks(facts)
    for split in Split:
        save_jsonl([task for task in tasks if task.split == split], staging / "tasks" / f"{split}.jsonl")
    counts = Counter(f"{task.domain}/{task.tier}/{task.split}" for task in tasks)
    manifest = EnvironmentManifest(
        seed=seed,
        worlds_per_domain=worlds_per_domain,
        world_ids=sorted(facts),
        task_counts=dict(sorted(counts.items())),
        content_digest=content_digest(staging),
        generation_seconds=round(time.perf_counter() - started, 3),
    )
    (staging / "manifest.json").write_text(manifest.model_dump_json(indent=2))
    # Swap the finished folder in whole: a crash mid-generation never leaves a half-written data folder (and a crash
    # mid-build leaves `<out>.building`, cleared by the next build).
    replace_dir(staging, out)
    return manifest


def load_manifest(out: Path) -> EnvironmentManifest | None:
    """The manifest of the environment in ``out``; None when there is none or it predates the current format (the
    folder is generated, so callers rebuild it)."""
    path = out / "manifest.json"
    if not path.exists():
        return None
    try:
        return EnvironmentManifest.model_validate(json.loads(path.read_text()))
    except (ValueError, ValidationError):
        return None


def ensure_environment(
    out: Path, seed: int = 0, worlds_per_domain: int = DEFAULT_WORLDS_PER_DOMAIN
) -> EnvironmentManifest:
    """Reuse ``out`` when it was built with ``seed`` and ``worlds_per_domain``; otherwise build it."""
    manifest = load_manifest(out)
    if manifest is not None and (manifest.seed, manifest.worlds_per_domain) == (seed, worlds_per_domain):
        return manifest
    return build_environment(out, seed=seed, worlds_per_domain=worlds_per_domain)


def load_tasks(out: Path, splits: tuple[Split, ...] = (Split.TRAIN, Split.HELDOUT)) -> list[TaskSpec]:
    return [task for split in splits for task in load_jsonl(out / "tasks" / f"{split}.jsonl")]
