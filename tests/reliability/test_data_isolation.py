"""Runs never share a mutable folder, and nothing the user owns is written into (issue: "nothing lost").

Before: two runs with different environment settings rebuilt one ``data/`` under each other (a run went on with the
other's worlds, another died on a half-replaced folder), two racing builds crashed on one staging folder and once left
a manifest that disagreed with the worlds on disk, ``recipe envs generate --out victim`` deleted the user's files, and
a base killed between its weights and its report was taken for a finished one by the next run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from envs.build import (
    MARKER,
    NoTaskSetError,
    build_environment,
    content_digest,
    environment_build,
    load_manifest,
    load_tasks,
)
from envs.files import ForeignFolderError

REPO = Path(__file__).resolve().parents[2]


def test_a_users_folder_is_never_written_into(tmp_path: Path, capsys) -> None:
    victim = tmp_path / "victim"
    (victim / "thesis").mkdir(parents=True)
    (victim / "thesis" / "chapter1.tex").write_text("x")
    assert main(["envs", "generate", "--out", str(victim)]) == 2
    assert "holds files rl-recipe did not write" in capsys.readouterr().err
    assert (victim / "thesis" / "chapter1.tex").read_text() == "x" and sorted(p.name for p in victim.iterdir()) == [
        "thesis"
    ]
    with pytest.raises(ForeignFolderError):
        environment_build(victim)  # a profile's environment.data pointing at it: refused the same way
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ForeignFolderError, match="is not a folder"):
        build_environment(tmp_path / "file")


@pytest.mark.parametrize("value", ["2", "0", "-1", "99999999999999999999999", "4.5"])
def test_an_impossible_number_of_worlds_is_refused_before_any_build(value: str, tmp_path: Path, capsys) -> None:
    """``--worlds-per-domain 2`` built no held-out world; 10**23 ended in a MemoryError."""
    with pytest.raises(SystemExit) as exit_info:
        main(["envs", "generate", "--out", str(tmp_path / "data"), "--worlds-per-domain", value])
    assert exit_info.value.code == 2 and "from 3 (world 3 is held out) to 1000" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()


def test_the_checkout_itself_is_never_a_data_folder(capsys, monkeypatch) -> None:
    """``recipe envs generate --out .`` in a checkout: refused, nothing written."""
    monkeypatch.chdir(REPO)
    assert main(["envs", "generate", "--out", "."]) == 2
    assert "is the folder you are in" in capsys.readouterr().err
    assert not (REPO / MARKER).exists() and not (REPO / "worlds").exists() and (REPO / "README.md").is_file()


def test_an_empty_current_folder_or_an_impossible_one_is_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    """Red-team finding 6: ``--out .`` in an empty folder and ``--out /proc/self/x`` ended in tracebacks, and
    ``recipe model bootstrap --data /nonexistent`` made that folder and built an environment there."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["envs", "generate", "--out", "."]) == 2
    assert "is the folder you are in" in capsys.readouterr().err and not any(empty.iterdir())
    assert main(["envs", "generate", "--out", "/proc/self/x"]) == 2
    assert "cannot build the environment in /proc/self/x: No such file or directory" in capsys.readouterr().err
    missing = tmp_path / "nonexistent"
    assert main(["model", "bootstrap", "--data", str(missing)]) == 2
    assert f"no environment in {missing} (no such folder)" in capsys.readouterr().err and not missing.exists()


def test_a_folder_rl_recipe_wrote_is_rebuilt_whole(tmp_path: Path) -> None:
    out = tmp_path / "data"
    first = build_environment(out, seed=0)
    assert (out / MARKER).is_file()
    second = build_environment(out, seed=1)  # ours: replaced whole, never mixed
    assert second.content_digest != first.content_digest and content_digest(out) == second.content_digest
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".data")]  # no staging left


def test_different_settings_get_different_builds_under_one_root(tmp_path: Path) -> None:
    root = tmp_path / "data"
    three, four = environment_build(root, worlds_per_domain=3), environment_build(root, worlds_per_domain=4)
    assert three != four and three.parent == four.parent == root
    assert len(load_manifest(three).world_ids) == 9 and len(load_manifest(four).world_ids) == 12
    assert environment_build(root, worlds_per_domain=3) == three  # reused, not rebuilt
    assert (three / "worlds" / "ib-1").is_dir() and not (three / "worlds" / "ib-4").exists()


def _build(root: str, queue) -> None:  # type: ignore[no-untyped-def]
    queue.put(str(environment_build(Path(root), worlds_per_domain=4)))


def test_two_racing_builds_leave_one_whole_build(tmp_path: Path) -> None:
    root = tmp_path / "data"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    racers = [context.Process(target=_build, args=(str(root), queue)) for _ in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=300)
        assert racer.exitcode == 0
    first, second = Path(queue.get()), Path(queue.get())
    assert first == second
    manifest = load_manifest(first)
    assert manifest is not None and content_digest(first) == manifest.content_digest
    assert sorted(p.name for p in (first / "worlds").iterdir()) == manifest.world_ids  # manifest and disk agree
    assert not [p for p in root.iterdir() if ".building" in p.name]


def test_a_damaged_build_is_set_aside_and_built_again(tmp_path: Path) -> None:
    root = tmp_path / "data"
    build = environment_build(root)
    victim = next((build / "worlds" / "ib-1").rglob("*.xlsx"))
    victim.write_bytes(b"damaged")
    again = environment_build(root)
    assert again == build and victim.read_bytes() != b"damaged"
    assert content_digest(again) == load_manifest(again).content_digest
    assert [p for p in root.iterdir() if ".damaged-" in p.name]  # kept aside for whoever still reads it


def test_a_root_that_is_a_build_is_used_and_never_touched_for_other_settings(tmp_path: Path) -> None:
    root = tmp_path / "data"
    manifest = build_environment(root)  # recipe envs generate --out data: the old layout
    assert environment_build(root) == root
    other = environment_build(root, worlds_per_domain=4)
    assert other.parent == root and content_digest(root) == manifest.content_digest  # the root's build is whole


def test_a_folder_without_a_task_set_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(NoTaskSetError, match=r"holds no task set .* recipe envs generate"):
        load_tasks(tmp_path)
    command = [sys.executable, "-m", "cli", "envs", "check", "--data", "/proc/self"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_a_base_killed_before_its_report_is_not_taken_for_a_finished_one(tmp_path: Path, monkeypatch) -> None:
    from trainer import bootstrap as bootstrap_module
    from trainer.specs import BootstrapSpec, TinyModelSpec

    data = tmp_path / "data"
    build_environment(data)
    model = TinyModelSpec(layers=1, hidden=32, heads=1, kv_heads=1, head_dim=32, intermediate=64, max_position=512)
    shape = {"steps": 2, "batch_size": 4, "traces_per_task": 1, "train_task_limit": 4, "warmup_steps": 0}
    spec = BootstrapSpec(model=model, vocab_size=400, parity_checks=0, eval_samples=1, **shape)
    cache = tmp_path / "models"

    def killed(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt("killed during the evaluation")

    monkeypatch.setattr(bootstrap_module, "evaluate_policy", killed)
    with pytest.raises(KeyboardInterrupt):
        bootstrap_module.bootstrap(spec, data, cache)
    key = bootstrap_module.content_hash(spec, data)
    assert not (cache / key).exists()  # weights without a report never look like a cached base
    monkeypatch.undo()
    result = bootstrap_module.bootstrap(spec, data, cache)
    assert not result.cached and (cache / key / "bootstrap.json").is_file()
    assert bootstrap_module.bootstrap(spec, data, cache).cached
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == [key]


@pytest.mark.slow
@pytest.mark.timeout(3600)  # two whole smoke pipelines on two cores: ~10 min alone, longer beside other work
def test_two_pipelines_with_different_settings_run_at_once(tmp_path: Path) -> None:
    """Two smoke runs in one checkout, one with 4 worlds per domain, started together: both pass on their own
    environment build, and each run records the one it used."""
    data, runs = tmp_path / "data", tmp_path / "runs"
    common = ["run", "--profile", "smoke", "--runs-root", str(runs), "--set", f"environment.data={data}"]
    env = os.environ | {"PREFECT_HOME": str(tmp_path / "prefect")}
    four = [*common, "--set", "environment.worlds_per_domain=4"]
    first = subprocess.Popen([sys.executable, "-m", "cli", *four], cwd=REPO, env=env)
    second = subprocess.Popen([sys.executable, "-m", "cli", *common], cwd=REPO, env=env)
    assert first.wait(timeout=3000) == 0 and second.wait(timeout=3000) == 0
    used = {}
    for manifest in runs.glob("*/1-derisk/manifest.json"):
        config = json.loads((manifest.parent.parent / "run.json").read_text())["config"]
        used[config["environment"]["worlds_per_domain"]] = Path(json.loads(manifest.read_text())["outputs"]["data"])
    assert set(used) == {3, 4} and used[3] != used[4]
    assert len(load_manifest(used[4]).world_ids) == 12 and len(load_manifest(used[3]).world_ids) == 9
