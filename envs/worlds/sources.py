"""Facts stated outside the workbooks, with where they are stated: the pdf report, the one-value reference files and
values written in prose (a document, the report, a message). Every domain records them the same way."""

from __future__ import annotations

from dataclasses import dataclass

from envs.worlds.facts import PdfFacts, TextFact
from envs.worlds.render import PdfSpec


@dataclass(frozen=True)
class Report:
    """The world's pdf report and the facts a task may ask about it."""

    spec: PdfSpec
    facts: PdfFacts


def report(spec: PdfSpec, wrapped_sentence: str, wrapped_value: str, wrapped_label: str) -> Report:
    """``spec`` with its facts: ``wrapped_sentence`` (part of the left column) states ``wrapped_value``; the page
    numbers are those of ``render.write_pdf``'s layout (columns on page 2, the table on page 3)."""
    facts = PdfFacts(
        path=spec.path, columns_page=2, wrapped_sentence=wrapped_sentence, wrapped_value=wrapped_value,
        wrapped_label=wrapped_label, table_page=3, table_header=spec.table[0], table_rows=spec.table[1:],
    )  # fmt: skip
    return Report(spec, facts)


REFERENCE_FOLDER = "reference/"


def stated(label: str, source: str, value: object) -> TextFact:
    """A fact stated in prose (a document, the report, a message): ``value`` as it is written there."""
    return TextFact(label=label, source=source, value=str(value))


def reference(label: str, name: str, value: object) -> TextFact:
    """A fact that is the whole of the one-value text file ``reference/<name>.txt`` (``generate_world`` writes it)."""
    return stated(label, f"{REFERENCE_FOLDER}{name}.txt", value)


def is_reference(fact: TextFact) -> bool:
    return fact.source.startswith(REFERENCE_FOLDER)
