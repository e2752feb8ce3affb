"""Red-team finding 5 (docs/reliability.md): ``recipe prune`` deleted outside the runs root.

A run folder that is a link had its target's checkpoints deleted; a ``run.json`` whose ``run_id`` is ``../victim`` (or
absolute), joined to ``cluster.storage``, had checkpoint-shaped folders outside storage deleted; and a checkpoint a kept
run named by a relative ``policy.path`` was kept or deleted depending on the folder prune ran from. Now prune touches
only real folders under the resolved runs root and storage root, never follows a link, and a relative reference
protects what it names from the run, from the checkout and from the current folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tasks.prune import prune_runs
from tasks.run_store import StageStatus
from tests.tasks.run_folders import add_stage, make_run


def checkpoint(work: Path, step: int = 2) -> Path:
    folder = work / "checkpoints" / f"step-{step:08d}"
    (folder / "policy").mkdir(parents=True)
    (folder / "policy" / "model.safetensors").write_bytes(b"w" * 100)
    return folder


def finished(runs_root: Path, run_id: str, hour: int, config: dict | None = None):  # type: ignore[no-untyped-def]
    store = make_run(runs_root, run_id, created_at=f"2026-12-01T{hour:02d}:00:00+00:00", config=config)
    add_stage(store, "4-overfit", StageStatus.PASSED)
    return store


def test_a_linked_run_folder_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    victim = finished(elsewhere, "local-0", 0)
    kept = checkpoint(victim.root / "4-overfit" / "train-overfit")
    runs = tmp_path / "runs"
    finished(runs, "local-2", 2)
    (runs / "local-1").symlink_to(victim.root, target_is_directory=True)
    pruned, _ = prune_runs(runs, keep_last=0)
    assert kept.is_dir() and "local-0" not in [run.run_id for run in pruned]


def test_a_run_id_in_run_json_never_leads_prune_out_of_storage(tmp_path: Path) -> None:
    storage, runs = tmp_path / "storage", tmp_path / "runs"
    outside = checkpoint(tmp_path / "victim" / "4-overfit" / "train-x")  # <storage>/../victim
    absolute = checkpoint(tmp_path / "absolute" / "4-overfit" / "train-y")
    ours = checkpoint(storage / "local-1" / "4-overfit" / "train-z")
    for run_id, claimed in (("local-1", "../victim"), ("local-2", str(tmp_path / "absolute"))):
        store = finished(runs, run_id, int(run_id[-1]), config={"cluster": {"storage": str(storage)}})
        store.write_info(store.info().model_copy(update={"run_id": claimed}))
    finished(runs, "local-3", 3)
    prune_runs(runs, keep_last=1)
    assert outside.is_dir() and absolute.is_dir()
    assert not ours.exists()  # the run's own folder on storage, by its folder's name, is pruned as before


def test_a_relative_policy_path_protects_its_checkpoint_from_any_folder(tmp_path: Path, monkeypatch) -> None:
    checkout = tmp_path / "checkout"
    runs = checkout / "runs"
    old = finished(runs, "local-1", 1)
    named = checkpoint(old.root / "4-overfit" / "train-overfit")
    reference = str(named.relative_to(checkout) / "policy")  # runs/local-1/4-overfit/...: as the run read it
    finished(runs, "local-2", 2, config={"policy": {"source": "folder", "path": reference}})
    elsewhere = tmp_path / "somewhere-else"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    prune_runs(Path(os.path.relpath(runs, elsewhere)), keep_last=1)
    assert named.is_dir()


@pytest.mark.parametrize("link_at", ["stage", "work"])
def test_a_link_inside_a_run_is_not_followed(tmp_path: Path, link_at: str) -> None:
    target = checkpoint(tmp_path / "target" / "train-t")
    runs = tmp_path / "runs"
    store = finished(runs, "local-1", 1)
    finished(runs, "local-2", 2)
    if link_at == "stage":
        (store.root / "5-ablations").symlink_to(target.parent.parent.parent, target_is_directory=True)
    else:
        (store.root / "4-overfit" / "train-linked").symlink_to(target.parent.parent, target_is_directory=True)
    prune_runs(runs, keep_last=1)
    assert target.is_dir()
