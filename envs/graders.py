"""Grade a finished rollout against its task's rubric: one pure function per criterion kind.

``grade(task, answer, world_before, world_after, judge)`` checks every criterion of ``task.rubric`` and returns a
``GradeResult`` (APEX-style: ``score`` = share of criteria met, ``passed`` = all of them met). Answer criteria read
the final answer; file criteria read the after-world (``file_unchanged`` compares the bytes of both worlds);
``llm_judge`` asks a ``Judge`` — unless the task requires a file output (``REQUIRED_OUTPUTS`` in its metadata) and the
rollout wrote or edited none, which fails the criterion without a judge call, as APEX grades; ``verifier_reward``
reads the reward a Harbor verifier wrote to ``world_after/logs/verifier/`` (a plain number in [0, 1], from a regular
file: never through a symlink). Each criterion result carries a detail string saying what was expected and found.

``diff_worlds(before, after)`` lists the files added, removed and modified (by SHA-256 of their content) under
``filesystem/`` and ``apps_data/``: the evidence given to a judge, and what audits show.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from envs.apps.base import ToolError
from envs.apps.docs import document_text
from envs.apps.sheets import Book, computed_value, format_value, stored_cells
from envs.apps.slides import deck_text
from envs.files import file_kind, open_regular, read_regular_bytes
from envs.jsonio import JsonError, parse_json
from envs.paths import PathEscapeError, resolve_inside
from envs.types import (
    AnswerContainsAll,
    AnswerEquals,
    AnswerNumeric,
    CriterionResult,
    DocxContains,
    FileExists,
    FileUnchanged,
    GradeResult,
    LlmJudge,
    PptxContains,
    TaskSpec,
    VerifierReward,
    VerifiersReward,
    XlsxCellEquals,
)

DIFFED_ROOTS = ("filesystem", "apps_data")
REQUIRED_OUTPUTS = "required_outputs"
"""``TaskSpec.metadata`` key: the suffixes (``[".docx"]``; ``[]``: any) of which the rollout must write or edit a file
under ``filesystem/`` before any ``llm_judge`` criterion is judged."""
VERIFIER_LOGS = Path("logs") / "verifier"
# A judge sees the changed files' text; the caps keep one huge output from crowding out the rest of its context.
EVIDENCE_CHARS_PER_FILE = 6_000
EVIDENCE_CHARS_TOTAL = 30_000
MAX_REWARD_BYTES = 1 << 20  # a verifier's reward file is a number or a small JSON object
# A reward as a verifier prints it: digits, a point, an exponent. float() also reads "inf", "nan", "1_0" and
# non-ASCII digits, none of which a verifier means as a reward.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_TEXT_SUFFIXES = frozenset({".txt", ".md", ".csv", ".tsv", ".json", ".py", ".sh", ".html", ".xml", ".yaml", ".yml"})
# What the document helpers raise on a file they cannot read: ToolError for a corrupt file, a missing sheet, a bad
# cell reference or a formula that cannot be computed; OSError for a file that cannot be opened at all.
_UNREADABLE = (ToolError, OSError)


class GradingError(RuntimeError):
    """The task cannot be graded as given (a judge is needed but missing, or the rubric names a file the pristine
    world does not have). Never raised for a wrong answer: that is a failed criterion."""


@dataclass(frozen=True)
class JudgeVerdict:
    passed: bool
    reason: str


class Judge(Protocol):
    """Decides one natural-language criterion (an OpenAI-compatible judge model in practice)."""

    def judge(self, task_prompt: str, criterion_text: str, answer: str | None, evidence: str) -> JudgeVerdict: ...


@dataclass(frozen=True)
class WorldDiff:
    """Paths relative to the world root (``filesystem/...``, ``apps_data/...``), each tuple sorted."""

    added: tuple[str, ...]
    removed: tuple[str, ...]
    modified: tuple[str, ...]

    def summary(self) -> str:
        """``added: a, b; modified: c`` (empty groups left out), or ``no files changed``."""
        groups = {"added": self.added, "removed": self.removed, "modified": self.modified}
        parts = [f"{name}: {', '.join(paths)}" for name, paths in groups.items() if paths]
        return "; ".join(parts) or "no files changed"


# --- answer parsing --------------------------------------------------------------------------------------------------

# A number as people write it in an answer: optional accounting parentheses "(12.0)" (negative), a sign (ASCII
# hyphen, Unicode minus or en dash) before or after a currency symbol, thousands commas, decimals, an exponent.
# Units that follow ("%", "m", "bn", "x") are left alone: "$1,234.5m" is 1234.5. The look-behind keeps digits that
# are part of a word or a range ("FY2025", "Q3", the second number of "2020-2025") from reading as numbers or
# negatives.
_NUMBER = re.compile(
    r"(?<![\w.,])(?P<open>\()?\s*(?P<sign>[-−–+])?\s*[$€£¥]?\s*(?P<sign2>[-−–+])?"
    r"(?P<digits>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?P<exp>[eE][-+]?\d+)?"
    r"(?:\s*[%a-zA-Z]*)?(?P<close>\s*\))?"
)
_NEGATIVE_SIGNS = frozenset("-−–")
_TRAILING_PUNCTUATION = ".,;:!?"


def parse_numbers(text: str) -> list[float]:
    """Every number in ``text``, in order: ``"$1,234.5m"`` → 1234.5, ``"12.5%"`` → 12.5, ``"(12.0)"`` → -12.0,
    ``"42."`` → 42.0. Units and percent signs are ignored, not applied."""
    numbers = []
    for match in _NUMBER.finditer(text):
        value = float(match["digits"].replace(",", "") + (match["exp"] or ""))
        negative = bool(match["open"] and match["close"]) or any(
            sign is not None and sign in _NEGATIVE_SIGNS for sign in (match["sign"], match["sign2"])
        )
        numbers.append(-value if negative else value)
    return numbers


def normalise_answer(text: str) -> str:
    """Case-folded, whitespace collapsed to single spaces, trailing punctuation removed."""
    return " ".join(text.casefold().split()).rstrip(_TRAILING_PUNCTUATION).rstrip()


def _fold(text: str) -> str:
    return " ".join(text.casefold().split())


# --- world diff ------------------------------------------------------------------------------------------------------


def _content_hash(path: Path) -> str:
    mode = path.lstat().st_mode
    if stat.S_ISLNK(mode):
        # A link is compared by where it points, never followed: it may point outside the world.
        return "symlink:" + os.readlink(path)
    if not stat.S_ISREG(mode):  # a FIFO model code left: opening it would block grading forever
        return f"special:{file_kind(mode)}"
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def world_hashes(world: Path) -> dict[str, str]:
    """Content hash of every file (and symlink) under the world's ``filesystem/`` and ``apps_data/``."""
    hashes = {}
    for root_name in DIFFED_ROOTS:
        root = world / root_name
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            here = Path(dirpath)
            linked_dirs = [name for name in dirnames if (here / name).is_symlink()]
            for name in [*filenames, *linked_dirs]:
                path = here / name
                hashes[path.relative_to(world).as_posix()] = _content_hash(path)
    return hashes


def diff_worlds(before: Path, after: Path) -> WorldDiff:
    """Files added, removed and modified between two worlds, compared by content hash."""
    old, new = world_hashes(before), world_hashes(after)
    return WorldDiff(
        added=tuple(sorted(new.keys() - old.keys())),
        removed=tuple(sorted(old.keys() - new.keys())),
        modified=tuple(sorted(path for path in old.keys() & new.keys() if old[path] != new[path])),
    )


# --- grading context -------------------------------------------------------------------------------------------------


class _Unmet(Exception):
    """A criterion is not met; the message is its detail. Lets a grader stop at the first thing that is wrong."""


def _workbook_text(path: Path) -> str:
    """``Sheet!A1 = value`` per non-empty cell, formulas as their computed value; stops at the evidence cap."""
    book = Book(path)  # one load and one formula evaluator for the whole workbook
    cells = ((sheet, cell) for sheet in book.workbook.worksheets for cell in stored_cells(sheet))
    lines: list[str] = []
    size = 0
    for sheet, cell in cells:
        if size > EVIDENCE_CHARS_PER_FILE:
            break
        if cell.value is None:
            continue
        try:
            shown = format_value(book.computed(sheet, cell.coordinate))
        except ToolError as error:
            shown = f"#ERROR({error})"
        lines.append(f"{sheet.title}!{cell.coordinate} = {shown}")
        size += len(lines[-1]) + 1
    return "\n".join(lines)


def _file_text(path: Path) -> str:
    extractors: dict[str, Callable[[Path], str]] = {".docx": document_text, ".pptx": deck_text, ".xlsx": _workbook_text}
    suffix = path.suffix.lower()
    if suffix in extractors:
        return extractors[suffix](path)
    if suffix in _TEXT_SUFFIXES:  # enough bytes for the evidence cap, never the whole of a huge file
        return read_regular_bytes(path, 4 * EVIDENCE_CHARS_PER_FILE).decode("utf-8", errors="replace")
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        return f"({file_kind(info.st_mode)}: content not shown)"
    return f"({info.st_size} bytes, {suffix or 'no suffix'} file: content not shown)"


@dataclass(frozen=True)
class _Context:
    task: TaskSpec
    answer: str | None
    world_before: Path
    world_after: Path
    judge: Judge | None

    def after_file(self, relative: str) -> Path:
        """An existing file of the after-world's ``filesystem/``, or the criterion is unmet."""
        try:
            path = resolve_inside(self.world_after / "filesystem", relative)
        except PathEscapeError as exc:
            raise _Unmet(f"{relative}: {exc}") from None
        if not path.is_file():
            raise _Unmet(f"{relative} does not exist after the rollout")
        return path

    def final_answer(self) -> str:
        if self.answer is None:
            raise _Unmet("no final answer was given")
        return self.answer

    @cached_property
    def diff(self) -> WorldDiff:
        return diff_worlds(self.world_before, self.world_after)

    def require_outputs(self) -> None:
        """The task's required file output was written or edited, or the criterion is unmet (no judge is asked)."""
        suffixes = self.task.metadata.get(REQUIRED_OUTPUTS)
        if suffixes is None:
            return
        changed = [path for path in (*self.diff.added, *self.diff.modified) if path.startswith("filesystem/")]
        if not any(not suffixes or Path(path).suffix.casefold() in suffixes for path in changed):
            wanted = f"a {'/'.join(suffixes)} file" if suffixes else "a file"
            raise _Unmet(f"the task's output is {wanted} under filesystem/; none was written or edited (not judged)")

    @cached_property
    def evidence(self) -> str:
        """What changed in the world, then the text of each added or modified file (capped)."""
        diff = self.diff
        sections = [f"World changes: {diff.summary()}"]
        budget = EVIDENCE_CHARS_TOTAL
        for relative in (*diff.added, *diff.modified):
            path = self.world_after / relative
            if path.is_symlink() or budget <= 0:
                continue
            try:
                text = _file_text(path)
            except _UNREADABLE as exc:
                text = f"(unreadable: {exc})"
            shown = text[: min(EVIDENCE_CHARS_PER_FILE, budget)]
            budget -= len(shown)
            sections.append(f"--- {relative} ---\n{shown}")
        return "\n\n".join(sections)


# --- criterion graders -----------------------------------------------------------------------------------------------

Grader = Callable[[Any, _Context], str]
"""Returns the detail of a met criterion; raises ``_Unmet(detail)`` for an unmet one."""

GRADERS: dict[str, Grader] = {}


def _grades(criterion_type: type[BaseModel]) -> Callable[[Grader], Grader]:
    kind = criterion_type.model_fields["kind"].default

    def register(grader: Grader) -> Grader:
        GRADERS[kind] = grader
        return grader

    return register


def _missing_items(items: list[str], text: str) -> list[str]:
    folded = _fold(text)
    return [item for item in items if _fold(item) not in folded]


def _require_all(items: list[str], text: str, where: str) -> str:
    missing = _missing_items(items, text)
    if missing:
        raise _Unmet(f"{where} lacks {missing!r} (of {items!r})")
    return f"{where} contains all of {items!r}"


@_grades(AnswerEquals)
def _answer_equals(criterion: AnswerEquals, ctx: _Context) -> str:
    # exact: only surrounding whitespace is dropped (a trailing newline is formatting, not content).
    answer = ctx.final_answer()
    found, expected = (
        (answer.strip(), criterion.expected)
        if criterion.exact
        else (normalise_answer(answer), normalise_answer(criterion.expected))
    )
    if found != expected:
        raise _Unmet(f"expected answer {expected!r}, found {found!r}")
    return f"answer equals {expected!r}"


MAX_NUMBERS_IN_NUMERIC_ANSWER = 3


@_grades(AnswerNumeric)
def _answer_numeric(criterion: AnswerNumeric, ctx: _Context) -> str:
    numbers = parse_numbers(ctx.final_answer())
    wanted = f"{criterion.expected!r} (rel_tol {criterion.rel_tol}, abs_tol {criterion.abs_tol})"
    # A policy under RL would learn to list many guesses; an answer may carry a little context, not a spread.
    if len(set(numbers)) > MAX_NUMBERS_IN_NUMERIC_ANSWER:
        raise _Unmet(f"answer holds {len(set(numbers))} numbers (at most {MAX_NUMBERS_IN_NUMERIC_ANSWER} allowed)")
    for number in numbers:
        if math.isclose(number, criterion.expected, rel_tol=criterion.rel_tol, abs_tol=criterion.abs_tol):
            return f"answer holds {number!r}, within tolerance of {wanted}"
    raise _Unmet(f"expected a number near {wanted}; answer holds {numbers!r}")


@_grades(AnswerContainsAll)
def _answer_contains_all(criterion: AnswerContainsAll, ctx: _Context) -> str:
    return _require_all(criterion.items, ctx.final_answer(), "answer")


@_grades(FileExists)
def _file_exists(criterion: FileExists, ctx: _Context) -> str:
    ctx.after_file(criterion.path)
    return f"{criterion.path} exists"


def _cell_matches(value: float | int | str | None, expected: float | str, tol: float) -> bool:
    if isinstance(expected, str):
        shown = "" if value is None else format_value(value)  # as sheets.read_cell prints it: 3.0 reads "3"
        return normalise_answer(shown) == normalise_answer(expected)
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return is_number and abs(value - expected) <= tol


@_grades(XlsxCellEquals)
def _xlsx_cell_equals(criterion: XlsxCellEquals, ctx: _Context) -> str:
    path = ctx.after_file(criterion.path)
    where = f"{criterion.path} {criterion.sheet}!{criterion.cell}"
    try:
        value = computed_value(path, criterion.sheet, criterion.cell)
    except _UNREADABLE as exc:
        raise _Unmet(f"cannot read {where}: {exc}") from None
    if not _cell_matches(value, criterion.expected, criterion.tol):
        raise _Unmet(f"expected {where} = {criterion.expected!r} (tol {criterion.tol}), found {value!r}")
    return f"{where} = {value!r}"


def _document_contains(path: str, items: list[str], ctx: _Context, reader: Callable[[Path], str]) -> str:
    file = ctx.after_file(path)
    try:
        text = reader(file)
    except _UNREADABLE as exc:
        raise _Unmet(f"cannot read {path}: {exc}") from None
    return _require_all(items, text, path)


@_grades(DocxContains)
def _docx_contains(criterion: DocxContains, ctx: _Context) -> str:
    return _document_contains(criterion.path, criterion.items, ctx, document_text)


@_grades(PptxContains)
def _pptx_contains(criterion: PptxContains, ctx: _Context) -> str:
    return _document_contains(criterion.path, criterion.items, ctx, deck_text)


@_grades(FileUnchanged)
def _file_unchanged(criterion: FileUnchanged, ctx: _Context) -> str:
    try:
        before = resolve_inside(ctx.world_before / "filesystem", criterion.path)
    except PathEscapeError as exc:
        raise GradingError(f"task {ctx.task.task_id}: file_unchanged path {criterion.path!r}: {exc}") from None
    if not before.is_file():
        raise GradingError(
            f"task {ctx.task.task_id}: file_unchanged names {criterion.path}, which the pristine world does not have"
        )
    after = ctx.after_file(criterion.path)
    old, new = _content_hash(before), _content_hash(after)
    if old != new:
        raise _Unmet(f"{criterion.path} was modified (sha256 {old[:12]} → {new[:12]})")
    return f"{criterion.path} is unchanged"


@_grades(LlmJudge)
def _llm_judge(criterion: LlmJudge, ctx: _Context) -> str:
    # grade() refuses to start without a judge when the rubric needs one, so ctx.judge is set here.
    assert ctx.judge is not None
    ctx.require_outputs()
    verdict = ctx.judge.judge(ctx.task.prompt, criterion.criteria, ctx.answer, ctx.evidence)
    if not verdict.passed:
        raise _Unmet(f"judge: not met ({criterion.criteria!r}): {verdict.reason}")
    return f"judge: met ({criterion.criteria!r}): {verdict.reason}"


def _reward_text(logs: Path, name: str) -> str | None:
    """The text of the reward file ``name`` (None: the verifier wrote none). A symlink is refused, never followed: the
    verifier could point it at a host file, whose first characters the detail would then show. (The verifier's
    processes are gone when it is graded: nothing can swap the file between the check and the read.)"""
    path = logs / name
    if path.is_symlink():
        raise _Unmet(f"{VERIFIER_LOGS}/{name} is a symbolic link, not a reward file: not read")
    return read_regular_bytes(path, MAX_REWARD_BYTES).decode(errors="replace") if path.is_file() else None


def _in_reward_range(value: float) -> bool:
    """Rewards lie in [0, 1]: a non-finite or out-of-range value is no reward (NaN compares false)."""
    return 0 <= value <= 1


def read_verifier_reward(world: Path) -> float:
    """The reward a Harbor verifier wrote, in [0, 1]: ``logs/verifier/reward.txt`` (one plain number) takes precedence
    over ``reward.json`` (``{"reward": x}``, or a dict of numbers whose mean is the reward) — Harbor's own order.
    Anything else (a non-finite or out-of-range value, ``1_0``, a symlink) is an unmet criterion, never a pass."""
    logs = world / VERIFIER_LOGS
    text = _reward_text(logs, "reward.txt")
    if text is not None:
        raw = text.strip()
        if not _PLAIN_NUMBER.fullmatch(raw) or not _in_reward_range(float(raw)):
            raise _Unmet(f"{VERIFIER_LOGS}/reward.txt holds {raw[:80]!r}, not a number in [0, 1]")
        return float(raw)
    text = _reward_text(logs, "reward.json")
    if text is None:
        raise _Unmet(f"the verifier wrote neither {VERIFIER_LOGS}/reward.txt nor reward.json")
    try:
        data = parse_json(text)
    except JsonError as exc:
        raise _Unmet(f"{VERIFIER_LOGS}/reward.json is not valid JSON: {exc}") from None
    if isinstance(data, dict) and "reward" in data:
        data = {"reward": data["reward"]}
    values = data if isinstance(data, dict) else {}
    if not values or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values.values()):
        raise _Unmet(f"{VERIFIER_LOGS}/reward.json must map names to numbers, found {str(data)[:120]}")
    for key, value in values.items():
        if not _in_reward_range(value):
            raise _Unmet(f"{VERIFIER_LOGS}/reward.json: {key[:80]!r} is {value!r:.80}, not a number in [0, 1]")
    return sum(values.values()) / len(values)


@_grades(VerifierReward)
def _verifier_reward(criterion: VerifierReward, ctx: _Context) -> str:
    reward = read_verifier_reward(ctx.world_after)
    if not reward >= criterion.min_reward:
        raise _Unmet(f"verifier reward {reward!r} < required {criterion.min_reward!r}")
    return f"verifier reward {reward!r} ≥ {criterion.min_reward!r}"


@_grades(VerifiersReward)
def _verifiers_reward(criterion: VerifiersReward, ctx: _Context) -> str:
    from envs.byo.verifiers_env import verifiers_reward

    reward = verifiers_reward(criterion, ctx.task.prompt, ctx.answer)
    if not reward >= criterion.min_reward:
        raise _Unmet(f"verifiers reward {reward!r} < required {criterion.min_reward!r}")
    return f"verifiers reward {reward!r} ≥ {criterion.min_reward!r}"


# --- entry point -----------------------------------------------------------------------------------------------------


def grade(
    task: TaskSpec, answer: str | None, world_before: Path, world_after: Path, judge: Judge | None = None
) -> GradeResult:
    """Check every criterion of ``task.rubric``; ``score`` = met / total, ``passed`` = all met.

    Raises ``GradingError`` when the rubric has ``llm_judge`` criteria and no ``judge`` is given (before grading
    anything: such a task must never silently pass or fail).
    """
    judged = sum(isinstance(criterion, LlmJudge) for criterion in task.rubric)
    if judged and judge is None:
        raise GradingError(
            f"task {task.task_id} has {judged} llm_judge criteria but no judge was given: pass judge= to grade()"
        )
    ctx = _Context(task, answer, world_before, world_after, judge)
    results = []
    for criterion in task.rubric:
        try:
            results.append(
                CriterionResult(kind=criterion.kind, passed=True, detail=GRADERS[criterion.kind](criterion, ctx))
            )
        except _Unmet as unmet:
            results.append(CriterionResult(kind=criterion.kind, passed=False, detail=str(unmet)))
    met = sum(result.passed for result in results)
    return GradeResult(criteria=results, score=met / len(results), passed=met == len(results))
