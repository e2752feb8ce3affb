"""``recipe prune``: old runs lose the checkpoints nothing points at and keep their audit trail; the newest N runs of
each profile, runs in progress and every recorded policy are left alone; a dry run changes nothing; the prune is in
``pruned.json`` and the audit; a stage that runs again after it does not follow a finished job to a checkpoint that
is gone."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli.main import main
from tasks.catalog import Catalog
from tasks.prune import CHECKPOINT_GLOBS, PRUNED_FILE, prune_log, prune_runs, pruned_work_folders
from tasks.report import audit_lines
from tasks.run_store import RunStore, StageStatus
from tests.tasks.run_folders import add_stage, make_run

WEIGHTS = 1000  # bytes of each checkpoint's fake weights file


def _checkpoint(work: Path, step: int) -> str:
    """A checkpoint folder ``work/checkpoints/step-<step>`` of WEIGHTS + 10 bytes; returns its policy folder."""
    folder = work / "checkpoints" / f"step-{step:08d}"
    (folder / "policy").mkdir(parents=True)
    (folder / "policy" / "model.safetensors").write_bytes(b"w" * WEIGHTS)
    (folder / "trainer_state.pt").write_bytes(b"s" * 10)
    return str(folder / "policy")


def _run(runs_root: Path, run_id: str, hour: int, profile: str = "local", config: dict | None = None) -> RunStore:
    """A finished run: overfit (checkpoints 4 and 8, the final one its output), two ablation arms (one checkpoint
    each, outputs none), hero (checkpoints 2 and 4, the final one its output, which transfer reads)."""
    store = make_run(runs_root, run_id, profile=profile, created_at=f"2026-12-01T{hour:02d}:00:00+00:00", config=config)
    overfit = store.root / "4-overfit" / "train-overfit-aaaa1111"
    _checkpoint(overfit, 4)
    overfit_policy = store.relative(Path(_checkpoint(overfit, 8)))
    (overfit / "history.json").write_text('{"kind": "sync", "steps": []}')
    (store.root / "4-overfit" / "eval-subset-base-bbbb2222").mkdir(parents=True)
    (store.root / "4-overfit" / "eval-subset-base-bbbb2222" / "trials.jsonl").write_text("{}\n")
    (store.root / "4-overfit" / "gate.md").write_text("# gate\n")
    add_stage(store, "4-overfit", StageStatus.PASSED, outputs={"policy": overfit_policy, "subset": ["t1"]})
    for arm in ("baseline", "dppo"):
        _checkpoint(store.root / "5-ablations" / f"train-{arm}-cccc3333", 2)
    add_stage(store, "5-ablations", StageStatus.PASSED, outputs={"landed": {"arm": "dppo"}})
    hero = store.root / "6-hero" / "train-hero-dppo-dddd4444"
    _checkpoint(hero, 2)
    hero_policy = store.relative(Path(_checkpoint(hero, 4)))
    add_stage(store, "6-hero", StageStatus.PASSED, outputs={"policy": hero_policy})
    add_stage(store, "7-transfer", StageStatus.PASSED)
    Catalog(store.catalog_path).append("gates", [{"stage": "overfit", "criterion": "gain", "passed": True}])
    return store


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


PRUNABLE = {
    "4-overfit/train-overfit-aaaa1111/checkpoints/step-00000004",
    "5-ablations/train-baseline-cccc3333/checkpoints/step-00000002",
    "5-ablations/train-dppo-cccc3333/checkpoints/step-00000002",
    "6-hero/train-hero-dppo-dddd4444/checkpoints/step-00000002",
}


def test_the_checkpoint_folders_are_where_the_loops_write_them() -> None:
    from trainer.loops.policy import CHECKPOINTS

    assert f"*/{CHECKPOINTS}/*" in CHECKPOINT_GLOBS


def test_a_dry_run_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for n in (1, 2):
        _run(tmp_path, f"local-{n}", n)
    before = _tree(tmp_path)
    runs, kept = prune_runs(tmp_path, keep_last=1, dry_run=True)
    assert kept == {"local": ["local-2"]}
    [old] = runs
    assert old.run_id == "local-1" and {f.path for f in old.removed} == PRUNABLE
    assert old.freed == 4 * (WEIGHTS + 10)
    assert main(["prune", "--keep-last", "1", "--runs-root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "local-1: would free 4040 bytes in 4 checkpoint folder(s)" in out and "dry run: nothing changed" in out
    assert _tree(tmp_path) == before and not (tmp_path / "local-1" / PRUNED_FILE).exists()


def test_a_prune_keeps_the_audit_trail_and_every_recorded_policy(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old, new = _run(tmp_path, "local-1", 1), _run(tmp_path, "local-2", 2)
    new_before, old_before = _tree(new.root), _tree(old.root)
    manifests = old.manifests()
    assert main(["prune", "--keep-last", "1", "--runs-root", str(tmp_path)]) == 0
    assert "local-1: freed 4040 bytes in 4 checkpoint folder(s)" in capsys.readouterr().out
    assert _tree(new.root) == new_before  # the newest run is kept whole
    after = _tree(old.root)
    gone = {path for path in old_before if path not in after}
    assert {str(Path(p).parent.parent) if "/policy/" in p else str(Path(p).parent) for p in gone} == PRUNABLE
    # The audit trail survives: run.json, manifests, gate report, catalog, step history, eval folder.
    assert old.manifests() == manifests and (old.root / "4-overfit" / "gate.md").read_text() == "# gate\n"
    assert Catalog(old.catalog_path).count("gates") == 1
    assert "4-overfit/train-overfit-aaaa1111/history.json" in after
    assert "4-overfit/eval-subset-base-bbbb2222/trials.jsonl" in after
    # What a later stage or a resume reads: the final policies of overfit and hero.
    for m in (old.manifest("4-overfit"), old.manifest("6-hero")):
        assert (old.root / m.outputs["policy"] / "model.safetensors").is_file()
    assert not [p for p in old.root.rglob(".pruned-*")]
    [prune] = prune_log(old).prunes
    assert prune.keep_last == 1 and prune.freed == 4040 and {f.path for f in prune.removed} == PRUNABLE
    trail = "\n".join(audit_lines(old))
    assert "pruned " in trail and "4 checkpoint folder(s), 4040 bytes, removed on purpose" in trail
    # Pruning again finds nothing more, and records nothing more.
    runs, _ = prune_runs(tmp_path, keep_last=1)
    assert runs[0].removed == [] and len(prune_log(old).prunes) == 1


def test_the_newest_n_of_each_profile_are_kept(tmp_path: Path) -> None:
    for n in (1, 2, 3):
        _run(tmp_path, f"local-{n}", n)
    for n in (4, 5):
        _run(tmp_path, f"smoke-{n}", n, profile="smoke")
    runs, kept = prune_runs(tmp_path, keep_last=2)
    assert kept == {"local": ["local-2", "local-3"], "smoke": ["smoke-4", "smoke-5"]}
    assert [r.run_id for r in runs] == ["local-1"]
    runs, kept = prune_runs(tmp_path, keep_last=0, profile="smoke", dry_run=True)
    assert kept == {"smoke": []} and [r.run_id for r in runs] == ["smoke-4", "smoke-5"]


def test_a_run_in_progress_is_not_touched(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    going = _run(tmp_path, "local-1", 1)
    add_stage(going, "7-transfer", StageStatus.RUNNING)
    _run(tmp_path, "local-2", 2)
    before = _tree(going.root)
    assert main(["prune", "--keep-last", "1", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "local-1: skipped: stage 7-transfer is running" in out
    assert _tree(going.root) == before


def test_a_checkpoint_another_run_points_at_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a config's relative paths are read from the working folder, as the run read them
    old = _run(tmp_path / "runs", "local-1", 1)
    new = _run(tmp_path / "runs", "local-2", 2)
    arm = "runs/local-1/5-ablations/train-dppo-cccc3333/checkpoints/step-00000002/policy"
    info = new.info()
    new.write_info(info.model_copy(update={"config": info.config | {"policy": {"path": arm}}}))
    [run], _ = prune_runs(Path("runs"), keep_last=1)
    assert "5-ablations/train-dppo-cccc3333/checkpoints/step-00000002" not in {f.path for f in run.removed}
    assert (old.root / "5-ablations/train-dppo-cccc3333/checkpoints/step-00000002/policy").is_dir()


def test_a_link_is_never_followed_out(tmp_path: Path) -> None:
    old = _run(tmp_path / "runs", "local-1", 1)
    _run(tmp_path / "runs", "local-2", 2)
    outside = tmp_path / "outside" / "step-00000009"
    outside.mkdir(parents=True)
    (outside / "keep.bin").write_bytes(b"k")
    os.symlink(outside, old.root / "4-overfit/train-overfit-aaaa1111/checkpoints/step-00000009")
    os.symlink(tmp_path / "outside", old.root / "6-hero/train-hero-dppo-dddd4444/checkpoints/../exports")
    prune_runs(tmp_path / "runs", keep_last=1)
    assert (outside / "keep.bin").read_bytes() == b"k"


def test_a_stage_run_again_does_not_follow_a_finished_job_into_a_pruned_folder(tmp_path: Path) -> None:
    from flows.config import StageName, load_profile
    from flows.stage import open_stage

    store = _run(tmp_path, "smoke-1", 1, "smoke", load_profile("smoke").model_dump(mode="json"))
    _run(tmp_path, "smoke-2", 2, "smoke")
    for folder in ("1-derisk", "2-tito", "3-systems"):
        add_stage(store, folder, StageStatus.PASSED)
    jobs = {
        "train-dppo-cccc3333": {"job_id": "j-dppo", "submissions": 1, "status": "SUCCEEDED"},  # its checkpoint: gone
        "train-baseline-cccc3333": {"job_id": "j-base", "submissions": 1, "status": "RUNNING"},  # still going: follow
        "train-prior-eeee5555": {"job_id": "j-prior", "submissions": 1, "status": "SUCCEEDED"},  # not pruned
    }
    ablations = store.manifest("5-ablations")
    store.write_manifest(ablations.model_copy(update={"jobs": jobs}))
    prune_runs(tmp_path, keep_last=1)
    assert pruned_work_folders(store, "5-ablations") == {"train-baseline-cccc3333", "train-dppo-cccc3333"}
    assert pruned_work_folders(store, "6-hero") == {"train-hero-dppo-dddd4444"}
    assert pruned_work_folders(store, "7-transfer") == set()
    with pytest.raises(RuntimeError, match="stop here"), open_stage(str(store.root), StageName.ABLATIONS) as stage:
        assert set(stage.manifest.jobs) == {"train-baseline-cccc3333", "train-prior-eeee5555"}
        raise RuntimeError("stop here")
