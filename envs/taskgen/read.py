"""Oracle steps that read one value each, saved under a name (``save_as``) for later steps and the answer (``${name}``).

Used qualified, as the oracles say it: ``read.cell(cell, "ev")``, ``read.mail("fee cap", "cap", pattern)``. An oracle
never knows the answer: it reads every value it needs with these, computes with ``steps.compute`` and answers with
what it saved; the rubrics' expected values come from the facts. Where a value takes two calls in every domain the
same way (find a message, then read it), the reader returns both steps.
"""

from __future__ import annotations

from envs.types import OracleStep
from envs.worlds import CellFact
from envs.worlds.facts import PdfFacts

FIRST_MESSAGE = r"^(m\d+) \|"
FIRST_EVENT = r"^(e\d+) \|"
"""The id of the first hit a mail or calendar search lists."""


def cell(fact: CellFact, save_as: str) -> OracleStep:
    return OracleStep(
        tool="sheets.read_cell", args={"path": fact.path, "sheet": fact.sheet, "cell": fact.cell}, save_as=save_as
    )


def formula(fact: CellFact, save_as: str) -> OracleStep:
    return OracleStep(
        tool="sheets.read_formula", args={"path": fact.path, "sheet": fact.sheet, "cell": fact.cell}, save_as=save_as
    )


def text_file(path: str, save_as: str) -> OracleStep:
    return OracleStep(tool="filesystem.read_file", args={"path": path}, save_as=save_as)


def document(path: str, save_as: str, pattern: str) -> OracleStep:
    return OracleStep(tool="docs.read_document", args={"path": path}, save_as=save_as, extract=pattern)


def report(pdf: PdfFacts, save_as: str, pattern: str) -> OracleStep:
    """Read the report's two-column page, where the sentence that wraps across lines states a value."""
    return OracleStep(
        tool="pdf.read_pdf", args={"path": pdf.path, "pages": str(pdf.columns_page)}, save_as=save_as, extract=pattern
    )


def chat(query: str, save_as: str, pattern: str) -> OracleStep:
    """Search the chat for ``query``; the hits list each message's text, so one search reads the value."""
    return OracleStep(tool="chat.search_messages", args={"query": query}, save_as=save_as, extract=pattern)


def mail(query: str, save_as: str, pattern: str) -> list[OracleStep]:
    """Search the mail for ``query`` and read the first hit (saved as ``message``): the value is in its body."""
    return [
        OracleStep(tool="mail.search_messages", args={"query": query}, save_as="message", extract=FIRST_MESSAGE),
        OracleStep(tool="mail.read_message", args={"message_id": "${message}"}, save_as=save_as, extract=pattern),
    ]


def event_start(query: str, hit: str = FIRST_EVENT) -> list[OracleStep]:
    """Search the calendar for ``query`` and read the start (saved as ``start``) of the event ``hit`` picks."""
    return [
        OracleStep(tool="calendar.search_events", args={"query": query}, save_as="event", extract=hit),
        OracleStep(
            tool="calendar.read_event", args={"event_id": "${event}"}, save_as="start", extract=r"^start: (.+)$"
        ),
    ]
