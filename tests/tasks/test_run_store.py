"""The run store: folders, manifests, config changes, and damaged files that fail naming the file."""

from pathlib import Path

import pytest

from tasks.run_store import (
    RunStore,
    RunStoreError,
    StageManifest,
    StageStatus,
    code_version,
    eval_folder_parts,
    eval_folder_stem,
    train_folder_label,
    train_folder_stem,
)


def test_create_open_and_manifests_in_stage_order(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "local", {"profile": "local"}, "abc", run_id="r1")
    assert RunStore.open(tmp_path, "r1").root == store.root == RunStore.open(tmp_path, str(store.root)).root
    for folder in ("10-late", "2-tito", "1-derisk"):
        store.write_manifest(StageManifest(stage=folder.split("-")[1], folder=folder, status=StageStatus.PASSED))
    assert [m.folder for m in store.manifests()] == ["1-derisk", "2-tito", "10-late"]
    assert store.manifest("2-tito").status is StageStatus.PASSED and store.manifest("3-x") is None
    with pytest.raises(RunStoreError, match="already holds a run"):
        RunStore.create(tmp_path, "local", {}, "abc", run_id="r1")


def test_config_changes_are_recorded_once(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "local", {"a": 1}, "h1", run_id="r")
    store.update_config({"a": 1}, "h1", "same")
    info = store.update_config({"a": 2}, "h2", "threshold fixed")
    assert info.config == {"a": 2} and [c.reason for c in info.history] == ["threshold fixed"]
    assert store.info().history[0].config_hash == "h2"


def test_damaged_files_name_themselves(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "local", {}, "h", run_id="r")
    (store.root / "run.json").write_text("{not json")
    with pytest.raises(RunStoreError, match=r"run\.json is not valid JSON"):
        store.info()
    (store.stage_dir("1-derisk") / "manifest.json").write_text('{"stage": 1}')
    with pytest.raises(RunStoreError, match=r"1-derisk/manifest\.json is not a StageManifest"):
        store.manifest("1-derisk")
    with pytest.raises(RunStoreError, match="no run 'missing'"):
        RunStore.open(tmp_path, "missing")


def test_code_version_of_this_checkout() -> None:
    version = code_version()
    assert version.commit is None or len(version.commit) == 40


def test_a_stage_evals_folder_name_is_written_and_read_back_in_one_place() -> None:
    for suite, label in [("heldout", "trained"), ("code_only", "dppo_prompt_mean_nudge"), ("mcq", "hero-dppo")]:
        assert eval_folder_parts(f"{eval_folder_stem(suite, label)}-0123abcd") == (suite, label)
    assert eval_folder_parts("train-hero-dppo-c6934748") is None and eval_folder_parts("eval-heldout") is None
    with pytest.raises(ValueError, match="holds no hyphen"):
        eval_folder_stem("held-out", "base")


def test_a_training_folder_name_reads_back_its_loop_label() -> None:
    for label in ("overfit", "hero-dppo_prompt_mean_nudge", "trial-0-budget4096-seqs32"):
        assert train_folder_label(f"{train_folder_stem(label)}-c6934748") == label
    assert train_folder_label("eval-heldout-base-0123abcd") is None and train_folder_label("train-") is None
