"""Shared machinery of the task generators: drafts, ids and splits, rubric helpers, the toy tasks and the shapes of
standard tasks.

A domain generator (a ``DomainTasks``: the shared toy tasks, then one builder per standard and deliverable task) turns
a world's ``WorldFacts`` into ``TaskDraft``s (tier, prompt, rubric, oracle, files); ``finalise`` numbers them
(``<world_id>-<tier>-<nnnn>``) and assigns the split. Oracles only ever answer with values they read from tool outputs
(``${name}``, see ``read`` and ``steps``); the expected values in the rubrics come from the facts. The deliverables'
shapes are in ``deliverables``.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any, TypeVar

from pydantic import BaseModel

from envs.apps.sheets import format_value
from envs.taskgen import read
from envs.taskgen.steps import compute, table_row_change
from envs.types import (
    AnswerContainsAll,
    AnswerEquals,
    AnswerNumeric,
    Criterion,
    Oracle,
    OracleStep,
    Split,
    TaskSpec,
    Tier,
)
from envs.worlds import CellFact, TextFact, WorldFacts, is_heldout_world

HELDOUT_SHARE = 0.15
"""Share of the tasks of training worlds that is held out too (chosen by a seeded hash of the task id)."""
SPLIT_SALT = "rl-recipe-split-v1"
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
        oracle=Oracle(steps=[read.cell(cell, "value")], answer="${value}"),
        input_files=[cell.path],
    )


def _toy_formula(cell: CellFact) -> TaskDraft:
    assert cell.formula is not None
    return TaskDraft(
        tier=Tier.TOY,
        prompt=f"Which formula is in cell {cell.cell} on sheet {cell.sheet} of {cell.path}? Answer with the formula "
        "only, starting with =.",
        rubric=[AnswerEquals(expected=cell.formula)],
        oracle=Oracle(steps=[read.formula(cell, "formula")], answer="${formula}"),
        input_files=[cell.path],
    )


def _toy_text(text: TextFact) -> TaskDraft:
    return TaskDraft(
        tier=Tier.TOY,
        prompt=f"The file {text.source} holds the {text.label}. What is it? Answer with the value only.",
        rubric=[answer_for(_number_or_text(text.value))],
        oracle=Oracle(steps=[read.text_file(text.source, "value")], answer="${value}"),
        input_files=[text.source],
    )


def _number_or_text(value: str) -> float | str:
    try:
        return float(value)
    except ValueError:
        return value


def calendar_days(start: str, end: str) -> int:
    """Calendar days from ISO date ``start`` to ISO date ``end`` (what ``steps.days_between`` prints)."""
    return (date.fromisoformat(end) - date.fromisoformat(start)).days


# --- standard tasks: one answer computed from values in two or more places -------------------------------------------


def standard_task(prompt: str, expected: float | str, steps: list[OracleStep], input_files: list[str]) -> TaskDraft:
    """A standard task: ``steps`` read the values and end by computing the answer (saved as ``result``, as
    ``steps.compute`` does); the rubric grades the answer against ``expected``, computed from the facts."""
    oracle = Oracle(steps=steps, answer="${result}")
    return TaskDraft(Tier.STANDARD, prompt, [answer_for(expected)], oracle, input_files)


@dataclass(frozen=True)
class PercentageTask:
    """A standard task as data: one cell as a percentage of another of the same workbook. ``prompt`` names files by
    role (``{register}``); ``part`` and ``whole`` are (the name the oracle saves the value as, the cell's fact key)."""

    prompt: str
    part: tuple[str, str]
    whole: tuple[str, str]

    def __call__(self, facts: WorldFacts) -> TaskDraft:
        (part_name, part_key), (whole_name, whole_key) = self.part, self.whole
        part, whole = facts.cells[part_key], facts.cells[whole_key]
        return standard_task(
            self.prompt.format(**facts.files),
            part.value / whole.value * 100,  # type: ignore[operator]
            [
                read.cell(part, part_name),
                read.cell(whole, whole_name),
                compute(f"${{{part_name}}} / ${{{whole_name}}} * 100", 4),
            ],
            [whole.path],
        )


@dataclass(frozen=True)
class TableChangeTask:
    """A standard task as data: how much the row ``row_label`` of the report's table changes from its first to its
    last column; the cells with fact keys ``first`` and ``last``, which the row was written from, give the expected
    value. ``prompt`` names files by role (``{report}``)."""

    prompt: str
    row_label: str
    first: str
    last: str

    def __call__(self, facts: WorldFacts) -> TaskDraft:
        change = facts.cells[self.last].value - facts.cells[self.first].value  # type: ignore[operator]
        steps = table_row_change(facts.pdf, self.row_label)
        return standard_task(self.prompt.format(**facts.files), change, steps, [facts.pdf.path])
