"""Shared machinery of the task generators: drafts, ids and splits, oracle steps and rubric helpers.

A domain generator (a ``DomainTasks``: the shared toy tasks, then one builder per standard and deliverable task) turns
a world's ``WorldFacts`` into ``TaskDraft``s (tier, prompt, rubric, oracle, files); ``finalise`` numbers them
(``<world_id>-<tier>-<nnnn>``) and assigns the split. Oracles only ever answer with values they read from tool outputs
(``${name}``); the expected values in the rubrics come from the facts.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel

from envs.apps.sheets import format_value
from envs.types import (
    AnswerContainsAll,
    AnswerEquals,
    AnswerNumeric,
    Criterion,
    DocxContains,
    FileExists,
    FileUnchanged,
    Oracle,
    OracleStep,
    PptxContains,
    Split,
    TaskSpec,
    Tier,
)
from envs.worlds import CellFact, TextFact, WorldFacts, is_heldout_world

HELDOUT_SHARE = 0.15
"""Share of the tasks of training worlds that is held out too (chosen by a seeded hash of the task id)."""
SPLIT_SALT = "rl-recipe-split-v1"
STDOUT_LINE = r"stdout:\n(.+)"
"""The first line a ``code_exec.run_python`` script printed."""
NUMERIC_TOLERANCE = 1e-3


@dataclass(frozen=True)
class TaskDraft:
    tier: Tier
    prompt: str
    rubric: list[Criterion]
    oracle: Oracle
    input_files: list[str] = field(default_factory=list)
    expected_outputs: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


TaskBuilder = Callable[[WorldFacts], TaskDraft]
InputsT = TypeVar("InputsT", bound=BaseModel)


@dataclass(frozen=True)
class DomainTasks:
    """A domain's generator: the shared toy tasks, then one task per builder, standard before deliverable (the order
    numbers the task ids)."""

    standard: tuple[TaskBuilder, ...]
    deliverable: tuple[TaskBuilder, ...]

    def __call__(self, facts: WorldFacts) -> list[TaskDraft]:
        return toy_tasks(facts) + [build(facts) for build in (*self.standard, *self.deliverable)]


def inputs_of(facts: WorldFacts, kind: type[InputsT]) -> InputsT:
    """The world's model inputs, checked to be the domain's ``kind`` (a generator only knows its own domain's)."""
    if not isinstance(facts.inputs, kind):
        raise TypeError(f"{facts.world_id} is a {facts.domain} world: it has no {kind.__name__}")
    return facts.inputs


def split_of(task_id: str, world_id: str) -> Split:
    """Held out when the world is held out, else for ~15 % of tasks by a salted SHA-256 of the task id."""
    if is_heldout_world(world_id):
        return Split.HELDOUT
    bucket = int.from_bytes(hashlib.sha256(f"{SPLIT_SALT}:{task_id}".encode()).digest()[:8], "big") / 2**64
    return Split.HELDOUT if bucket < HELDOUT_SHARE else Split.TRAIN


def finalise(facts: WorldFacts, drafts: list[TaskDraft]) -> list[TaskSpec]:
    """Number the drafts per tier in order and wrap them as ``TaskSpec``s."""
    numbers: Counter[Tier] = Counter()
    tasks = []
    for draft in drafts:
        numbers[draft.tier] += 1
        task_id = f"{facts.world_id}-{draft.tier}-{numbers[draft.tier]:04d}"
        tasks.append(
            TaskSpec(
                task_id=task_id,
                world_id=facts.world_id,
                domain=facts.domain,
                tier=draft.tier,
                split=split_of(task_id, facts.world_id),
                prompt=draft.prompt,
                rubric=draft.rubric,
                input_files=draft.input_files,
                expected_outputs=draft.expected_outputs,
                oracle=draft.oracle,
                metadata={"project": facts.project, **draft.metadata},
            )
        )
    return tasks


# --- oracle steps ----------------------------------------------------------------------------------------------------


def read_cell(cell: CellFact, save_as: str) -> OracleStep:
    return OracleStep(
        tool="sheets.read_cell", args={"path": cell.path, "sheet": cell.sheet, "cell": cell.cell}, save_as=save_as
    )


def read_text_file(path: str, save_as: str) -> OracleStep:
    return OracleStep(tool="filesystem.read_file", args={"path": path}, save_as=save_as)


def run_python(code: str, save_as: str = "result") -> OracleStep:
    """Run ``code`` (``${name}`` references are substituted first) and save the first line it prints."""
    return OracleStep(tool="code_exec.run_python", args={"code": code}, save_as=save_as, extract=STDOUT_LINE)


def read_document(path: str, save_as: str, pattern: str) -> OracleStep:
    return OracleStep(tool="docs.read_document", args={"path": path}, save_as=save_as, extract=pattern)


def read_message(message_id: str, save_as: str, pattern: str) -> OracleStep:
    return OracleStep(tool="mail.read_message", args={"message_id": message_id}, save_as=save_as, extract=pattern)


def read_event(event_id: str, save_as: str, field_name: str) -> OracleStep:
    return OracleStep(
        tool="calendar.read_event", args={"event_id": event_id}, save_as=save_as, extract=rf"^{field_name}: (.+)$"
    )


def write_cell(cell: CellFact, value: float | int | str) -> OracleStep:
    return OracleStep(
        tool="sheets.write_cell", args={"path": cell.path, "sheet": cell.sheet, "cell": cell.cell, "value": value}
    )


# --- rubric ----------------------------------------------------------------------------------------------------------


def numeric(expected: float, rel_tol: float = NUMERIC_TOLERANCE) -> AnswerNumeric:
    return AnswerNumeric(expected=float(expected), rel_tol=rel_tol, abs_tol=1e-6)


def answer_for(value: float | int | str) -> Criterion:
    """A number is graded with tolerance, a date as contained text, any other text as equal (case-insensitive)."""
    if isinstance(value, int | float):
        return numeric(value)
    if len(value) == 10 and value[4] == "-" and value[7] == "-":
        return AnswerContainsAll(items=[value])
    return AnswerEquals(expected=value)


def shown(value: float | int | str) -> str:
    """How the sheets app prints ``value`` (what an oracle substitutes into a file it writes)."""
    return format_value(value)


# --- toy tasks (shared by every domain) ------------------------------------------------------------------------------

TOY_CELLS_PER_WORLD = 14
TOY_FORMULAS_PER_WORLD = 2


def toy_tasks(facts: WorldFacts) -> list[TaskDraft]:
    """One-call tasks: read a named cell (sampled per world), a cell's formula, or a one-value reference file.

    The tool call isolates the value, so the only skill is choosing the right tool and arguments.
    """
    rng = random.Random(f"toy:{facts.world_id}:{facts.seed}")
    formula_keys = sorted(key for key, cell in facts.cells.items() if cell.formula)
    value_keys = rng.sample(formula_keys, min(TOY_CELLS_PER_WORLD, len(formula_keys)))
    drafts = [_toy_cell(facts.cells[key]) for key in value_keys]
    drafts += [_toy_formula(facts.cells[key]) for key in rng.sample(formula_keys, TOY_FORMULAS_PER_WORLD)]
    drafts += [_toy_text(text) for text in facts.texts.values() if text.source.startswith("reference/")]
    return drafts


def _toy_cell(cell: CellFact) -> TaskDraft:
    unit = f" ({cell.unit})" if cell.unit else ""
    return TaskDraft(
        tier=Tier.TOY,
        prompt=f"What is the value of cell {cell.cell} on sheet {cell.sheet} of {cell.path} ({cell.label}{unit})? "
        "Answer with the value only.",
        rubric=[answer_for(cell.value)],
        oracle=Oracle(steps=[read_cell(cell, "value")], answer="${value}"),
        input_files=[cell.path],
    )


def _toy_formula(cell: CellFact) -> TaskDraft:
    assert cell.formula is not None
    return TaskDraft(
        tier=Tier.TOY,
        prompt=f"Which formula is in cell {cell.cell} on sheet {cell.sheet} of {cell.path}? Answer with the formula "
        "only, starting with =.",
        rubric=[AnswerEquals(expected=cell.formula)],
        oracle=Oracle(
            steps=[
                OracleStep(
                    tool="sheets.read_formula",
                    args={"path": cell.path, "sheet": cell.sheet, "cell": cell.cell},
                    save_as="formula",
                )
            ],
            answer="${formula}",
        ),
        input_files=[cell.path],
    )


def _toy_text(text: TextFact) -> TaskDraft:
    return TaskDraft(
        tier=Tier.TOY,
        prompt=f"The file {text.source} holds the {text.label}. What is it? Answer with the value only.",
        rubric=[answer_for(_number_or_text(text.value))],
        oracle=Oracle(steps=[read_text_file(text.source, "value")], answer="${value}"),
        input_files=[text.source],
    )


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


def calendar_days(start: str, end: str) -> int:
    """Calendar days from ISO date ``start`` to ISO date ``end`` (what ``days_between`` prints)."""
    return (date.fromisoformat(end) - date.fromisoformat(start)).days


def days_between(start: str, end: str) -> OracleStep:
    """Print the calendar days from saved date ``start`` to saved date ``end`` (ISO dates or date-times)."""
    return run_python(
        "from datetime import date\n"
        f"print((date.fromisoformat('${{{end}}}'[:10]) - date.fromisoformat('${{{start}}}'[:10])).days)"
    )


def table_row_change(path: str, page: int, row_label: str) -> list[OracleStep]:
    """Read the first and the last figure of a pdf table row (``| label | a | ... | z |``) and print z − a."""
    return [
        OracleStep(tool="pdf.read_tables", args={"path": path, "page": page}, save_as="first",
                   extract=rf"^\| {row_label} \| ([\d,.]+) \|"),
        OracleStep(tool="pdf.read_tables", args={"path": path, "page": page}, save_as="last",
                   extract=rf"^\| {row_label} \|.* \| ([\d,.]+) \|$"),
        run_python("print(round(float('${last}'.replace(',', '')) - float('${first}'.replace(',', '')), 2))"),
    ]  # fmt: skip


# --- write-up deliverables (a Word document or a slide quoting cells) ------------------------------------------------


class WriteUp(StrEnum):
    DOCUMENT = "document"
    SLIDE = "slide"


@dataclass(frozen=True)
class _WriteUpKind:
    tool: str
    lines_arg: str
    criterion: type[DocxContains] | type[PptxContains]
    request: str


WRITE_UPS = {
    WriteUp.DOCUMENT: _WriteUpKind("docs.create_document", "paragraphs", DocxContains, "Write a Word document {path}"),
    WriteUp.SLIDE: _WriteUpKind("slides.add_slide", "bullets", PptxContains, "Add a slide to {path}"),
}


@dataclass(frozen=True)
class Line:
    """One line of a write-up: ``prefix`` + the cell's value as the sheets app shows it + ``suffix``."""

    prefix: str
    cell: CellFact
    suffix: str = ""


def write_up_task(kind: WriteUp, path: str, title: str, lines: list[Line], guard: str) -> TaskDraft:
    """A deliverable that quotes cells in a new document or slide, line by line, leaving ``guard`` untouched.

    The rubric checks every full line (not bare numbers, which other text could contain by chance).
    """
    spec = WRITE_UPS[kind]
    sources = sorted({line.cell.path for line in lines})
    wanted = "; ".join(f"'{line.prefix}<{line.cell.label}>{line.suffix}'" for line in lines)
    expected = [f"{line.prefix}{shown(line.cell.value)}{line.suffix}" for line in lines]
    criteria: list[Criterion] = [spec.criterion(path=path, items=[title, *expected]), FileUnchanged(path=guard)]
    if kind is WriteUp.DOCUMENT:
        criteria.insert(0, FileExists(path=path))
    steps = [read_cell(line.cell, f"v{index}") for index, line in enumerate(lines)]
    written = [f"{line.prefix}${{v{index}}}{line.suffix}" for index, line in enumerate(lines)]
    steps.append(OracleStep(tool=spec.tool, args={"path": path, "title": title, spec.lines_arg: written}))
    return TaskDraft(
        tier=Tier.DELIVERABLE,
        prompt=f"{spec.request.format(path=path)} titled '{title}' with one line each: {wanted}, taking the values "
        f"from {' and '.join(sources)} exactly as the sheets show them. Do not modify {guard}.",
        rubric=criteria,
        oracle=Oracle(steps=steps, answer=f"Wrote the {kind} '{title}' to {path}: " + "; ".join(written)),
        input_files=sorted({*sources, path} if kind is WriteUp.SLIDE else sources),
        expected_outputs=[path],
    )


# --- CSV exports (cells copied into a new file, then summarised) -----------------------------------------------------


class Aggregate(StrEnum):
    SUM = "sum"
    MEAN = "mean"


_AGGREGATE_CODE = {
    Aggregate.SUM: "print(round({terms}, 2))",
    Aggregate.MEAN: "print(round(({terms}) / {count}, 4))",
}


@dataclass(frozen=True)
class CsvExport:
    """Cells of ``source`` written to ``path``: a ``header`` line, then one ``label,value`` line per row; each row is
    (label, the name the oracle saves the value as, the cell)."""

    path: str
    header: str
    rows: list[tuple[str, str, CellFact]]
    source: str


def export_task(export: CsvExport, prompt: str, aggregate: Aggregate) -> TaskDraft:
    """A deliverable that exports cells to a CSV file and answers with their sum or mean, leaving the source as is."""
    values = [float(cell.value) for _, _, cell in export.rows]
    expected = sum(values) / len(values) if aggregate is Aggregate.MEAN else sum(values)
    names = [name for _, name, _ in export.rows]
    content = export.header + "\n" + "".join(f"{label},${{{name}}}\n" for label, name, _ in export.rows)
    terms = " + ".join(f"${{{name}}}" for name in names)
    return TaskDraft(
        Tier.DELIVERABLE,
        prompt,
        [FileExists(path=export.path), numeric(expected), FileUnchanged(path=export.source)],
        Oracle(
            steps=[
                *[read_cell(cell, name) for _, name, cell in export.rows],
                OracleStep(tool="filesystem.write_file", args={"path": export.path, "content": content}),
                run_python(_AGGREGATE_CODE[aggregate].format(terms=terms, count=len(names))),
            ],
            answer="${result}",
        ),
        [export.source],
        [export.path],
    )
