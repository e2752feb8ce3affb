"""Graders: every criterion kind met and unmet on hand-built tiny worlds, numeric parsing, world diffs."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

import docx
import openpyxl
import pytest
from pptx import Presentation
from pptx.util import Inches

from envs.graders import GRADERS, GradingError, JudgeVerdict, diff_worlds, grade, normalise_answer, parse_numbers
from envs.types import (
    AnswerContainsAll,
    AnswerEquals,
    AnswerNumeric,
    Criterion,
    DocxContains,
    Domain,
    FileExists,
    FileUnchanged,
    LlmJudge,
    PptxContains,
    TaskSpec,
    VerifierReward,
    XlsxCellEquals,
)

# --- tiny worlds -----------------------------------------------------------------------------------------------------


def _make_world(root: Path) -> Path:
    fs = root / "filesystem"
    (fs / "models").mkdir(parents=True)
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Model"
    sheet["A5"] = "Revenue"
    sheet["C3"] = 100
    sheet["C4"] = 312.5
    sheet["C5"] = "=SUM(C3:C4)"  # 412.5, only known by computing the formula (openpyxl stores no cached value)
    workbook.save(fs / "models" / "model.xlsx")

    document = docx.Document()
    document.add_paragraph("Investment memo for Acme")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text = "EBITDA"
    table.cell(0, 1).text = "103.1"
    document.save(fs / "memo.docx")

    deck = Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Q3 review"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(4), Inches(1))
    box.text_frame.text = "Revenue up 12%"
    deck.save(fs / "deck.pptx")

    (fs / "notes.txt").write_text("keep me\n")
    (root / "apps_data" / "mail").mkdir(parents=True)
    (root / "apps_data" / "mail" / "mailbox.json").write_text(json.dumps({"messages": []}))
    return root


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_world(tmp_path_factory.mktemp("before") / "world")


@pytest.fixture
def after(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "after", symlinks=True))


def _task(*criteria: Criterion) -> TaskSpec:
    return TaskSpec(
        task_id="t1",
        world_id="w1",
        domain=Domain.INVESTMENT_BANKING,
        prompt="Report FY25 revenue.",
        rubric=list(criteria),
    )


def _one(criterion: Criterion, pristine: Path, after: Path, answer: str | None = None, judge: object = None):
    result = grade(_task(criterion), answer, pristine, after, judge)  # type: ignore[arg-type]
    (only,) = result.criteria
    assert only.kind == criterion.kind
    assert result.passed == only.passed
    assert result.score == (1.0 if only.passed else 0.0)
    return only


def _cell(cell: str, expected: float | str, sheet: str = "Model") -> XlsxCellEquals:
    return XlsxCellEquals(path="models/model.xlsx", sheet=sheet, cell=cell, expected=expected)


# --- answer parsing --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("$1,234.5m", [1234.5]),
        ("12.5%", [12.5]),
        ("(12.0)", [-12.0]),
        ("The answer is 42.", [42.0]),
        ("-3.5 and −2", [-3.5, -2.0]),
        ("-$7 or $-8", [-7.0, -8.0]),
        ("€0.25bn", [0.25]),
        (".5", [0.5]),
        ("1e3 units", [1000.0]),
        ("FY2025 revenue was 412.5", [412.5]),
        ("from 2020-2025", [2020.0, 2025.0]),
        ("(see note 4)", [4.0]),
        ("1,234,567", [1234567.0]),
        ("no numbers here", []),
    ],
)
def test_parse_numbers(text: str, numbers: list[float]) -> None:
    assert parse_numbers(text) == numbers


@pytest.mark.parametrize(
    ("text", "normal"),
    [("  Acme   Corp.  ", "acme corp"), ("ACME!?", "acme"), ("a\nb", "a b"), ("1.5", "1.5")],
)
def test_normalise_answer(text: str, normal: str) -> None:
    assert normalise_answer(text) == normal


# --- answer criteria -------------------------------------------------------------------------------------------------


def test_answer_equals(pristine: Path, after: Path) -> None:
    loose = AnswerEquals(expected="Acme Corp")
    assert _one(loose, pristine, after, "  acme   corp. ").passed
    unmet = _one(loose, pristine, after, "Acme Inc")
    assert not unmet.passed
    assert "'acme corp'" in unmet.detail and "'acme inc'" in unmet.detail
    exact = AnswerEquals(expected="Acme Corp", exact=True)
    assert _one(exact, pristine, after, "Acme Corp\n").passed
    assert not _one(exact, pristine, after, "acme corp").passed


def test_answer_numeric(pristine: Path, after: Path) -> None:
    criterion = AnswerNumeric(expected=412.5, rel_tol=1e-3)
    assert _one(criterion, pristine, after, "FY2025 revenue was $412.6m.").passed  # |Δ| 0.1 ≤ 0.4125
    unmet = _one(criterion, pristine, after, "FY2025 revenue was $413m.")  # |Δ| 0.5 > 0.4125
    assert not unmet.passed
    assert "[413.0]" in unmet.detail
    assert _one(AnswerNumeric(expected=-12.0), pristine, after, "a loss of (12.0)").passed


def test_answer_contains_all(pristine: Path, after: Path) -> None:
    criterion = AnswerContainsAll(items=["Acme", "net  debt"])
    assert _one(criterion, pristine, after, "ACME has Net Debt of 3").passed
    unmet = _one(criterion, pristine, after, "Acme has debt")
    assert not unmet.passed
    assert "['net  debt']" in unmet.detail


def test_no_answer_fails_answer_criteria(pristine: Path, after: Path) -> None:
    unmet = _one(AnswerEquals(expected="x"), pristine, after, None)
    assert not unmet.passed
    assert unmet.detail == "no final answer was given"


# --- file criteria ---------------------------------------------------------------------------------------------------


def test_file_exists(pristine: Path, after: Path) -> None:
    (after / "filesystem" / "out").mkdir()
    (after / "filesystem" / "out" / "report.txt").write_text("done")
    assert _one(FileExists(path="out/report.txt"), pristine, after).passed
    unmet = _one(FileExists(path="out/missing.txt"), pristine, after)
    assert not unmet.passed
    assert "out/missing.txt does not exist" in unmet.detail
    escaped = _one(FileExists(path="../apps_data/mail/mailbox.json"), pristine, after)
    assert not escaped.passed
    assert "leaves the world root" in escaped.detail


def test_file_exists_refuses_a_symlink_out_of_the_world(pristine: Path, after: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    os.symlink(outside, after / "filesystem" / "link.txt")
    assert not _one(FileExists(path="link.txt"), pristine, after).passed


def test_xlsx_cell_equals_reads_the_computed_formula(pristine: Path, after: Path) -> None:
    assert _one(_cell("C5", 412.5), pristine, after).passed
    assert _one(_cell("A5", "revenue"), pristine, after).passed
    unmet = _one(_cell("C5", 400.0), pristine, after)
    assert not unmet.passed
    assert "expected models/model.xlsx Model!C5 = 400.0" in unmet.detail and "412.5" in unmet.detail
    text_for_number = _one(_cell("A5", 1.0), pristine, after)
    assert not text_for_number.passed


def test_xlsx_cell_equals_after_an_edit(pristine: Path, after: Path) -> None:
    book = after / "filesystem" / "models" / "model.xlsx"
    workbook = openpyxl.load_workbook(book)
    workbook["Model"]["C3"] = 200
    workbook.save(book)
    criterion = _cell("C5", 512.5)
    assert _one(criterion, pristine, after).passed
    assert not _one(criterion, pristine, pristine).passed


def test_xlsx_cell_equals_unreadable_inputs_fail_with_a_reason(pristine: Path, after: Path) -> None:
    missing_sheet = _one(_cell("C5", 1.0, sheet="Modle"), pristine, after)
    assert not missing_sheet.passed
    assert "cannot read" in missing_sheet.detail
    (after / "filesystem" / "broken.xlsx").write_text("not a workbook")
    corrupt = _one(XlsxCellEquals(path="broken.xlsx", sheet="Model", cell="C5", expected=1.0), pristine, after)
    assert not corrupt.passed
    assert "cannot read" in corrupt.detail


def test_docx_contains_reads_paragraphs_and_tables(pristine: Path, after: Path) -> None:
    assert _one(DocxContains(path="memo.docx", items=["investment MEMO", "ebitda", "103.1"]), pristine, after).passed
    unmet = _one(DocxContains(path="memo.docx", items=["Acme", "net debt"]), pristine, after)
    assert not unmet.passed
    assert "['net debt']" in unmet.detail
    assert not _one(DocxContains(path="absent.docx", items=["x"]), pristine, after).passed


def test_pptx_contains(pristine: Path, after: Path) -> None:
    assert _one(PptxContains(path="deck.pptx", items=["q3 REVIEW", "up 12%"]), pristine, after).passed
    unmet = _one(PptxContains(path="deck.pptx", items=["Q4"]), pristine, after)
    assert not unmet.passed
    assert "['Q4']" in unmet.detail


def test_file_unchanged(pristine: Path, after: Path) -> None:
    criterion = FileUnchanged(path="notes.txt")
    assert _one(criterion, pristine, after).passed
    (after / "filesystem" / "notes.txt").write_text("keep me!\n")
    modified = _one(criterion, pristine, after)
    assert not modified.passed
    assert "notes.txt was modified" in modified.detail
    (after / "filesystem" / "notes.txt").unlink()
    deleted = _one(criterion, pristine, after)
    assert not deleted.passed
    assert "does not exist" in deleted.detail


def test_file_unchanged_on_a_file_the_pristine_world_lacks_is_a_task_error(pristine: Path, after: Path) -> None:
    with pytest.raises(GradingError, match="pristine world does not have"):
        grade(_task(FileUnchanged(path="ghost.txt")), None, pristine, after)


# --- verifier reward -------------------------------------------------------------------------------------------------


def _reward_file(world: Path, name: str, content: str) -> None:
    logs = world / "logs" / "verifier"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / name).write_text(content)


@pytest.mark.parametrize(
    ("name", "content", "minimum", "passed"),
    [
        ("reward.txt", "1.0\n", 1.0, True),
        ("reward.txt", "0.4", 0.5, False),
        ("reward.json", '{"reward": 0.75}', 0.5, True),
        ("reward.json", '{"tests": 1.0, "style": 0.0}', 1.0, False),  # mean 0.5
        ("reward.json", '{"tests": 1.0, "style": 0.5}', 0.75, True),  # mean 0.75
    ],
)
def test_verifier_reward(pristine: Path, after: Path, name: str, content: str, minimum: float, passed: bool) -> None:
    _reward_file(after, name, content)
    assert _one(VerifierReward(min_reward=minimum), pristine, after).passed == passed


def test_verifier_reward_txt_takes_precedence_over_json(pristine: Path, after: Path) -> None:
    _reward_file(after, "reward.txt", "0")
    _reward_file(after, "reward.json", '{"reward": 1}')
    unmet = _one(VerifierReward(), pristine, after)
    assert not unmet.passed
    assert "0.0 < required 1.0" in unmet.detail


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        (None, "", "neither"),
        ("reward.txt", "passed", "not a number"),
        ("reward.json", "{oops", "not valid JSON"),
        ("reward.json", '{"tests": "yes"}', "must map names to numbers"),
        ("reward.json", "[1, 2]", "must map names to numbers"),
    ],
)
def test_verifier_reward_missing_or_malformed(pristine: Path, after: Path, name: str | None, content: str, reason: str):
    if name is not None:
        _reward_file(after, name, content)
    unmet = _one(VerifierReward(min_reward=0.0), pristine, after)
    assert not unmet.passed
    assert reason in unmet.detail


# --- llm judge -------------------------------------------------------------------------------------------------------


@dataclass
class _StubJudge:
    verdict: bool
    calls: list[tuple[str, str, str | None, str]] = field(default_factory=list)

    def judge(self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str) -> JudgeVerdict:
        self.calls.append((task_prompt, criterion_text, answer, evidence))
        return JudgeVerdict(passed=self.verdict, reason="because")


def test_llm_judge_without_a_judge_raises(pristine: Path, after: Path) -> None:
    task = _task(AnswerEquals(expected="x"), LlmJudge(criteria="is polite"))
    with pytest.raises(GradingError, match="task t1 has 1 llm_judge criteria but no judge"):
        grade(task, "x", pristine, after)


def test_llm_judge_asks_the_judge_with_the_world_changes_as_evidence(pristine: Path, after: Path) -> None:
    (after / "filesystem" / "summary.md").write_text("Revenue is 412.5")
    (after / "filesystem" / "notes.txt").unlink()
    judge = _StubJudge(verdict=True)
    met = _one(LlmJudge(criteria="States revenue"), pristine, after, "412.5", judge)
    assert met.passed
    assert met.detail == "judge: met ('States revenue'): because"
    ((prompt, criterion, answer, evidence),) = judge.calls
    assert (prompt, criterion, answer) == ("Report FY25 revenue.", "States revenue", "412.5")
    assert "added: filesystem/summary.md" in evidence
    assert "removed: filesystem/notes.txt" in evidence
    assert "--- filesystem/summary.md ---\nRevenue is 412.5" in evidence


def test_llm_judge_evidence_shows_changed_workbooks_computed(pristine: Path, after: Path) -> None:
    book = after / "filesystem" / "models" / "model.xlsx"
    workbook = openpyxl.load_workbook(book)
    workbook["Model"]["C3"] = 200
    workbook.save(book)
    judge = _StubJudge(verdict=False)
    unmet = _one(LlmJudge(criteria="Updates the model"), pristine, after, None, judge)
    assert not unmet.passed
    assert unmet.detail == "judge: not met ('Updates the model'): because"
    evidence = judge.calls[0][3]
    assert "modified: filesystem/models/model.xlsx" in evidence
    assert "Model!C5 = 512.5" in evidence


# --- aggregation, registry, diff -------------------------------------------------------------------------------------


def test_score_is_the_share_of_criteria_met(pristine: Path, after: Path) -> None:
    task = _task(AnswerNumeric(expected=412.5), FileExists(path="notes.txt"), FileExists(path="missing.txt"))
    result = grade(task, "412.5", pristine, after)
    assert [c.passed for c in result.criteria] == [True, True, False]
    assert result.score == pytest.approx(2 / 3)
    assert not result.passed


def test_every_criterion_kind_has_a_grader() -> None:
    kinds = {member.model_fields["kind"].default for member in get_args(get_args(Criterion)[0])}
    assert kinds == set(GRADERS)


def test_diff_worlds(pristine: Path, after: Path, tmp_path: Path) -> None:
    fs = after / "filesystem"
    (fs / "new").mkdir()
    (fs / "new" / "a.txt").write_text("a")
    (fs / "notes.txt").unlink()
    (fs / "memo.docx").write_bytes((fs / "memo.docx").read_bytes() + b"\0")
    (after / "apps_data" / "mail" / "mailbox.json").write_text('{"messages": [{"id": "m001"}]}')
    os.utime(fs / "deck.pptx", (0, 0))  # touched, same bytes: not modified
    (after / "logs").mkdir()
    (after / "logs" / "x.txt").write_text("outside the diffed roots")
    os.symlink(tmp_path, fs / "linked_dir")  # never followed
    diff = diff_worlds(pristine, after)
    assert diff.added == ("filesystem/linked_dir", "filesystem/new/a.txt")
    assert diff.removed == ("filesystem/notes.txt",)
    assert diff.modified == ("apps_data/mail/mailbox.json", "filesystem/memo.docx")
    assert diff_worlds(pristine, pristine).summary() == "no files changed"


def test_numeric_answer_listing_many_guesses_fails(tmp_path):
    from envs.graders import MAX_NUMBERS_IN_NUMERIC_ANSWER, grade
    from envs.types import AnswerNumeric, Domain, TaskSpec

    task = TaskSpec(task_id="t", world_id="w", domain=Domain.GENERAL, prompt="p", rubric=[AnswerNumeric(expected=5)])
    (tmp_path / "filesystem").mkdir()
    guesses = ", ".join(str(n) for n in range(1, MAX_NUMBERS_IN_NUMERIC_ANSWER + 6))
    assert not grade(task, guesses, tmp_path, tmp_path).passed
    assert grade(task, "Revenue grew 3% to 5", tmp_path, tmp_path).passed
