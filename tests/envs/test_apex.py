"""APEX-Agents releases: the fixture release (tests/envs/data/apex_release) loads, its worlds unzip into our layout with
task files overlaid, a missing required file fails judged criteria without a judge call, and trainers refuse APEX."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from envs.apex import (
    APEX_LICENCE,
    EVALUATION_ONLY,
    EvaluationOnlyTaskError,
    load_apex_release,
    materialize_worlds,
    required_outputs,
)
from envs.errors import RecipeError
from envs.graders import REQUIRED_OUTPUTS, JudgeVerdict, grade
from envs.loaders import TaskLoadError
from envs.types import Split
from trainer.loops import TaskFilter

RELEASE = Path(__file__).parent / "data" / "apex_release"


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return Path(shutil.copytree(RELEASE, tmp_path / "release"))


def test_the_fixture_release_loads_with_worlds_licence_and_required_outputs() -> None:
    revenue, memo = load_apex_release(RELEASE)
    assert (revenue.task_id, revenue.world_id) == ("apex-revenue", "world_fixture_ib")
    assert memo.world_id == "world_fixture_ib.apex-memo"  # task files: a world of its own
    assert memo.metadata["apex_world_id"] == "world_fixture_ib"
    assert revenue.metadata["world_description"].startswith("A one-note investment banking world")
    assert revenue.split is Split.HELDOUT and revenue.metadata[EVALUATION_ONLY] == APEX_LICENCE
    assert REQUIRED_OUTPUTS not in revenue.metadata
    assert memo.metadata[REQUIRED_OUTPUTS] == [".doc", ".docx"]
    assert memo.input_files == ["inputs/brief.txt"] and memo.expected_outputs == ["make_new_file"]


@pytest.mark.parametrize(
    ("output", "file_type", "required"),
    [
        ("message_in_console", "N/A", None),
        (None, None, None),
        ("edit_existing_file", "Spreadsheets (.xlsx, .XLS)", [".xls", ".xlsx"]),
        ("make_new_file", "N/A", []),
    ],
)
def test_required_outputs(output: str | None, file_type: str | None, required: list[str] | None) -> None:
    assert required_outputs(output, file_type) == required


def test_worlds_unzip_into_our_layout_with_task_files_overlaid(tmp_path: Path) -> None:
    tasks = load_apex_release(RELEASE)
    worlds = materialize_worlds(RELEASE, tasks, tmp_path / "worlds")
    shared, own = worlds / "world_fixture_ib", worlds / "world_fixture_ib.apex-memo"
    assert (shared / "filesystem" / "notes" / "q1.txt").read_text().startswith("Q1 revenue: 412.5")
    assert (shared / "filesystem" / "README.txt").is_file()  # an entry outside filesystem/ is a file of it
    assert (shared / "apps_data").is_dir() and not (shared / "filesystem" / "inputs").exists()
    assert (own / "filesystem" / "inputs" / "brief.txt").read_text() == "Keep the memo to one page.\n"
    assert (own / "filesystem" / "notes" / "q1.txt").is_file()


def test_a_built_world_is_kept_until_its_inputs_change(release: Path, tmp_path: Path) -> None:
    tasks = load_apex_release(release)
    note = materialize_worlds(release, tasks, tmp_path / "w") / "world_fixture_ib" / "filesystem" / "notes" / "q1.txt"
    note.write_text("edited by hand\n")
    materialize_worlds(release, tasks, tmp_path / "w")
    assert note.read_text() == "edited by hand\n"  # same zip: not rebuilt
    zipped = release / "world_files_zipped" / "world_fixture_ib.zip"
    os.utime(zipped, ns=(zipped.stat().st_atime_ns, zipped.stat().st_mtime_ns + 1_000_000_000))
    materialize_worlds(release, tasks, tmp_path / "w")
    assert note.read_text().startswith("Q1 revenue")


def test_apps_data_entries_map_and_escaping_entries_are_refused(release: Path, tmp_path: Path) -> None:
    zipped = release / "world_files_zipped" / "world_fixture_ib.zip"
    with zipfile.ZipFile(zipped, "a") as archive:
        archive.writestr(".apps_data/mail/inbox.json", "[]")
    tasks = load_apex_release(release)
    worlds = materialize_worlds(release, tasks, tmp_path / "ok")
    assert (worlds / "world_fixture_ib" / "apps_data" / "mail" / "inbox.json").read_text() == "[]"
    with zipfile.ZipFile(zipped, "a") as archive:
        archive.writestr("../escape.txt", "x")
    with pytest.raises(TaskLoadError, match="would leave the world folder"):
        materialize_worlds(release, tasks, tmp_path / "bad")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "bad" / "world_fixture_ib").exists()


def test_a_missing_world_zip_names_it(release: Path) -> None:
    (release / "world_files_zipped" / "world_fixture_ib.zip").unlink()
    with pytest.raises(TaskLoadError, match=r"world_files_zipped/world_fixture_ib.zip.*is missing"):
        load_apex_release(release)


class _CountingJudge:
    """A ``Judge`` that passes everything and counts its calls (grading logic only; the HTTP judge is tested in
    tests/evals/test_apex_eval.py against a real server)."""

    def __init__(self) -> None:
        self.calls = 0

    def judge(self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str) -> JudgeVerdict:
        self.calls += 1
        return JudgeVerdict(passed=True, reason="ok")


def test_a_missing_required_file_fails_judged_criteria_without_a_judge_call(tmp_path: Path) -> None:
    _, memo = load_apex_release(RELEASE)
    worlds = materialize_worlds(RELEASE, [memo], tmp_path / "worlds")
    pristine, after = worlds / memo.world_id, tmp_path / "after"
    shutil.copytree(pristine, after)
    judge = _CountingJudge()
    (after / "filesystem" / "outputs").mkdir()
    (after / "filesystem" / "outputs" / "memo.txt").write_text("Q1 revenue was 412.5 million")  # not a .docx
    result = grade(memo, "I wrote the memo to outputs/memo.docx.", pristine, after, judge)
    assert (result.passed, judge.calls) == (False, 0)
    assert "a .doc/.docx file under filesystem/; none was written or edited (not judged)" in result.criteria[0].detail
    (after / "filesystem" / "outputs" / "memo.docx").write_bytes(b"not really a docx")
    assert grade(memo, "Done.", pristine, after, judge).passed and judge.calls == 1


def test_trainers_refuse_apex_tasks_naming_them_and_the_licence() -> None:
    tasks = load_apex_release(RELEASE)
    with pytest.raises(EvaluationOnlyTaskError) as refused:
        TaskFilter(tier=None, split=None).select(tasks)
    assert isinstance(refused.value, RecipeError)
    message = str(refused.value)
    assert "apex-memo, apex-revenue" in message and APEX_LICENCE in message
    ok = [task.model_copy(update={"metadata": {}}) for task in tasks]
    assert TaskFilter(tier=None, split=None).select(ok) == ok
    assert json.loads(json.dumps(tasks[0].metadata))[EVALUATION_ONLY] == APEX_LICENCE  # survives a JSONL round trip
