"""The overfit gate over runs (``tasks.history``): the nights in creation order with their commits and numbers, and the
last pass / first failure of the current streak, in the report and in ``recipe history``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import main
from flows.config import StageName
from tasks.history import OVERFIT_FOLDER, failure_streak, overfit_history
from tasks.report import write_report
from tasks.run_store import StageStatus
from tests.tasks.run_folders import add_stage, make_run, overfit


def _night(runs_root: Path, n: int, *, passed: bool | None, profile: str = "local"):
    """Run ``local-<n>`` created at hour ``n`` with commit ``<n>`` × 40; its overfit passed (True), failed (False) or
    is absent (None)."""
    store = make_run(
        runs_root, f"{profile}-{n}", profile=profile, created_at=f"2026-12-01T{n:02d}:00:00+00:00", commit=str(n) * 40
    )
    if passed is not None:
        overfit(store, passed, gain=0.3 if passed else 0.01, p_value=0.001 if passed else 0.4)
    return store


def test_the_overfit_folder_is_the_stage_s() -> None:
    assert StageName.OVERFIT.folder == OVERFIT_FOLDER


def test_all_passed(tmp_path: Path) -> None:
    for n in (1, 2, 3):
        _night(tmp_path, n, passed=True)
    nights = overfit_history(tmp_path, "local")
    assert [n.run_id for n in nights] == ["local-1", "local-2", "local-3"]
    assert nights[0].gain == 0.3 and nights[0].p_value == 0.001 and nights[0].code.commit == "1" * 40
    streak = failure_streak(nights)
    assert streak.last_passed is nights[-1] and streak.first_failed is None and streak.failures == 0
    assert streak.lines() == [
        "last passed at 3333333333 (run local-3, 2026-12-01T03:00:00+00:00)",
        "first failed: – (no failure since)",
    ]


def test_a_streak_of_failures_after_passes_names_both_commits(tmp_path: Path) -> None:
    # Created out of folder-name order: the history follows created_at, not the names.
    _night(tmp_path, 4, passed=False)
    _night(tmp_path, 1, passed=True)
    _night(tmp_path, 2, passed=False)  # an old failure, healed by the pass after it
    _night(tmp_path, 3, passed=True)
    skipped = _night(tmp_path, 5, passed=None)  # de-risk failed: the overfit gate was never reached
    add_stage(skipped, "1-derisk", StageStatus.GATE_FAILED)
    add_stage(skipped, OVERFIT_FOLDER, StageStatus.SKIPPED, error="stage derisk did not pass")
    running = _night(tmp_path, 6, passed=None)  # tonight's run, still going: neither a pass nor a failure
    add_stage(running, OVERFIT_FOLDER, StageStatus.RUNNING)
    nights = overfit_history(tmp_path, "local")
    assert [n.run_id for n in nights] == [f"local-{n}" for n in range(1, 7)]
    streak = failure_streak(nights)
    assert streak.last_passed is not None and streak.last_passed.run_id == "local-3"
    assert streak.first_failed is not None and streak.first_failed.run_id == "local-4"
    assert streak.failures == 2
    passed, failed = streak.lines()
    assert passed == "last passed at 3333333333 (run local-3, 2026-12-01T03:00:00+00:00)"
    assert failed.startswith("first failed at 4444444444 (run local-4, 2026-12-01T04:00:00+00:00)")
    assert streak.as_json()["first_failed"]["commit"] == "4" * 40
    assert nights[3].failed_criteria == ("subset reward gain", "one-sided p (paired over tasks)")
    assert nights[4].note == "stage derisk did not pass" and nights[4].failed


def test_never_passed(tmp_path: Path) -> None:
    _night(tmp_path, 1, passed=False)
    _night(tmp_path, 2, passed=False)
    streak = failure_streak(overfit_history(tmp_path, "local"))
    assert streak.last_passed is None and streak.failures == 2
    assert streak.lines()[0] == "last passed: never"
    assert streak.lines()[1].startswith("first failed at 1111111111 (run local-1,")
    assert streak.as_json()["last_passed"] is None


def test_runs_without_an_overfit_stage_and_other_profiles_are_left_out(tmp_path: Path) -> None:
    _night(tmp_path, 1, passed=True)
    stopped = _night(tmp_path, 2, passed=None)  # recipe run --stop-after tito
    add_stage(stopped, "1-derisk", StageStatus.PASSED)
    add_stage(stopped, "2-tito", StageStatus.PASSED)
    _night(tmp_path, 3, passed=False, profile="smoke")
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / "run.json").write_text("{not json")
    assert [n.run_id for n in overfit_history(tmp_path, "local")] == ["local-1"]
    assert overfit_history(tmp_path / "nowhere", "local") == []


def test_the_report_of_any_run_of_the_profile_shows_the_history(tmp_path: Path) -> None:
    _night(tmp_path, 1, passed=True)
    this = _night(tmp_path, 2, passed=False)
    files = write_report(this)
    markdown = files.markdown.read_text()
    assert "## The overfit gate over the runs of local" in markdown
    assert "| local-2 (this run) |" in markdown and "| local-1 |" in markdown
    assert markdown.index("| local-1 |") < markdown.index("| local-2 (this run) |")  # newest last
    assert "last passed at 1111111111 (run local-1" in markdown and "first failed at 2222222222" in markdown
    assert "last passed at 1111111111" in files.html.read_text()


def test_recipe_history_prints_the_table_and_the_two_lines(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _night(tmp_path, 1, passed=True)
    _night(tmp_path, 2, passed=False)
    assert main(["history", "--profile", "local", "--runs-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| local-1 |" in out and "| 1111111111 |" in out and "gate_failed" in out
    assert "last passed at 1111111111" in out and "first failed at 2222222222" in out
    assert main(["history", "--profile", "nope", "--runs-root", str(tmp_path)]) == 0
    assert "no run of profile nope" in capsys.readouterr().out
