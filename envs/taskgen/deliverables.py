"""The shapes of deliverable tasks: change a model input and report what it moves, write up cells in a document or a
slide, or export cells to a CSV file. A domain's deliverables are these shapes filled in with its cells and files."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from envs.taskgen import read
from envs.taskgen.common import TaskDraft, numeric, shown
from envs.taskgen.steps import compute, write_cell
from envs.types import (
    Criterion,
    DocxContains,
    FileExists,
    FileUnchanged,
    Oracle,
    OracleStep,
    PptxContains,
    Tier,
    XlsxCellEquals,
)
from envs.worlds import CellFact, WorldFacts
from envs.worlds.content import clean

# --- what-if deliverables (change an input cell, report a result) ----------------------------------------------------


def what_if_task(
    prompt: str,
    edit: tuple[CellFact, float | int | str],
    result: tuple[CellFact, str, float],
    guard: str,
    also: tuple[tuple[CellFact, float], ...] = (),
) -> TaskDraft:
    """A deliverable that sets ``edit``'s cell to a new value and reports the ``result`` cell (saved under its name)
    after the workbook recomputes, leaving ``guard`` untouched.

    The rubric checks the saved workbook's result cell (and the ``also`` cells) at the precision the sheets app
    prints, and the reported answer against the unrounded expected value.
    """
    (cell, value), (result_cell, name, expected) = edit, result
    checks = [*also, (result_cell, expected)]
    rubric: list[Criterion] = [
        XlsxCellEquals(path=checked.path, sheet=checked.sheet, cell=checked.cell, expected=clean(wanted))
        for checked, wanted in checks
    ]
    return TaskDraft(
        Tier.DELIVERABLE,
        prompt,
        [*rubric, numeric(expected), FileUnchanged(path=guard)],
        Oracle(steps=[write_cell(cell, value), read.cell(result_cell, name)], answer=f"${{{name}}}"),
        [result_cell.path],
        [result_cell.path],
    )


# --- write-up deliverables (a Word document or a slide quoting cells) ------------------------------------------------


@dataclass(frozen=True)
class _WriteUpKind:
    """How a write-up is made (the tool and its argument for the lines), checked and asked for."""

    name: str
    tool: str
    lines_arg: str
    criterion: type[DocxContains] | type[PptxContains]
    request: str


_DOCUMENT = _WriteUpKind("document", "docs.create_document", "paragraphs", DocxContains, "Write a Word document {path}")
_SLIDE = _WriteUpKind("slide", "slides.add_slide", "bullets", PptxContains, "Add a slide to {path}")


@dataclass(frozen=True)
class Line:
    """One line of a write-up: ``prefix`` + the value of the cell with fact key ``key``, as the sheets app shows it,
    + ``suffix``."""

    prefix: str
    key: str
    suffix: str = ""


@dataclass(frozen=True)
class WriteUpTask:
    """A deliverable as data: quote cells line by line in a new Word document at ``document`` or, without one, on a
    new slide of the world's deck, leaving the file of role ``guard`` untouched.

    The rubric checks every full line (not bare numbers, which other text could contain by chance).
    """

    title: str
    lines: tuple[Line, ...]
    guard: str
    document: str | None = None

    def __call__(self, facts: WorldFacts) -> TaskDraft:
        kind, path = (_DOCUMENT, self.document) if self.document else (_SLIDE, facts.files["deck"])
        guard, title = facts.files[self.guard], self.title
        quoted = [(line, facts.cells[line.key]) for line in self.lines]
        sources = sorted({cell.path for _, cell in quoted})
        wanted = "; ".join(f"'{line.prefix}<{cell.label}>{line.suffix}'" for line, cell in quoted)
        expected = [f"{line.prefix}{shown(cell.value)}{line.suffix}" for line, cell in quoted]
        criteria: list[Criterion] = [kind.criterion(path=path, items=[title, *expected]), FileUnchanged(path=guard)]
        if kind is _DOCUMENT:
            criteria.insert(0, FileExists(path=path))
        steps = [read.cell(cell, f"v{index}") for index, (_, cell) in enumerate(quoted)]
        written = [f"{line.prefix}${{v{index}}}{line.suffix}" for index, line in enumerate(self.lines)]
        steps.append(OracleStep(tool=kind.tool, args={"path": path, "title": title, kind.lines_arg: written}))
        return TaskDraft(
            tier=Tier.DELIVERABLE,
            prompt=f"{kind.request.format(path=path)} titled '{title}' with one line each: {wanted}, taking the values "
            f"from {' and '.join(sources)} exactly as the sheets show them. Do not modify {guard}.",
            rubric=criteria,
            oracle=Oracle(steps=steps, answer=f"Wrote the {kind.name} '{title}' to {path}: " + "; ".join(written)),
            input_files=sorted({*sources, path} if kind is _SLIDE else sources),
            expected_outputs=[path],
        )


# --- CSV exports (cells copied into a new file, then summarised) -----------------------------------------------------


class Aggregate(StrEnum):
    SUM = "sum"
    MEAN = "mean"


_AGGREGATE_EXPRESSIONS = {
    Aggregate.SUM: ("{terms}", 2),
    Aggregate.MEAN: ("({terms}) / {count}", 4),
}
"""What the oracle prints for each aggregate (over ``terms``, the saved values added up), and to how many decimals."""


@dataclass(frozen=True)
class ExportTask:
    """A deliverable as data: copy cells of the workbook with role ``source`` to the CSV file ``path`` (a ``header``
    line, then one ``label,value`` line per row) and answer with their sum or mean, leaving the workbook as is.

    ``rows`` are (label, the name the oracle saves the value as, the cell's fact key); ``prompt`` names files by role
    (``{model}``) and the export as ``{path}``.
    """

    prompt: str
    path: str
    header: str
    rows: tuple[tuple[str, str, str], ...]
    source: str
    aggregate: Aggregate

    def __call__(self, facts: WorldFacts) -> TaskDraft:
        source, cells = facts.files[self.source], [facts.cells[key] for _, _, key in self.rows]
        values = [float(cell.value) for cell in cells]
        expected = sum(values) / len(values) if self.aggregate is Aggregate.MEAN else sum(values)
        names = [name for _, name, _ in self.rows]
        content = self.header + "\n" + "".join(f"{label},${{{name}}}\n" for label, name, _ in self.rows)
        terms = " + ".join(f"${{{name}}}" for name in names)
        expression, digits = _AGGREGATE_EXPRESSIONS[self.aggregate]
        return TaskDraft(
            Tier.DELIVERABLE,
            self.prompt.format(path=self.path, **facts.files),
            [FileExists(path=self.path), numeric(expected), FileUnchanged(path=source)],
            Oracle(
                steps=[
                    *[read.cell(cell, name) for name, cell in zip(names, cells, strict=True)],
                    OracleStep(tool="filesystem.write_file", args={"path": self.path, "content": content}),
                    compute(expression.format(terms=terms, count=len(names)), digits),
                ],
                answer="${result}",
            ),
            [source],
            [self.path],
        )
