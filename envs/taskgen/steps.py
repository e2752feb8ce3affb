"""Oracle steps that compute or write: the scripted tool calls an oracle makes after it has read its values (``read``).

``compute`` and the other scripts run in ``code_exec`` with the saved values substituted for their ``${name}``s and
save the first line they print, as ``result`` unless told otherwise (what a standard task answers with).
"""

from __future__ import annotations

from envs.types import OracleStep
from envs.worlds import CellFact
from envs.worlds.facts import PdfFacts

STDOUT_LINE = r"stdout:\n(.+)"
"""The first line a ``code_exec.run_python`` script printed."""


def run_python(code: str, save_as: str = "result") -> OracleStep:
    """Run ``code`` (``${name}`` references are substituted first) and save the first line it prints."""
    return OracleStep(tool="code_exec.run_python", args={"code": code}, save_as=save_as, extract=STDOUT_LINE)


def compute(expression: str, digits: int) -> OracleStep:
    """Print ``expression`` (over saved ``${name}``s) rounded to ``digits`` decimals, saved as ``result``."""
    return run_python(f"print(round({expression}, {digits}))")


def days_between(start: str, end: str) -> OracleStep:
    """Print the calendar days from saved date ``start`` to saved date ``end`` (ISO dates or date-times)."""
    return run_python(
        "from datetime import date\n"
        f"print((date.fromisoformat('${{{end}}}'[:10]) - date.fromisoformat('${{{start}}}'[:10])).days)"
    )


def table_row_change(pdf: PdfFacts, row_label: str) -> list[OracleStep]:
    """Read the first and the last figure of a row of the report's table (``| label | a | ... | z |``), print z − a."""
    args = {"path": pdf.path, "page": pdf.table_page}
    return [
        OracleStep(tool="pdf.read_tables", args=args, save_as="first", extract=rf"^\| {row_label} \| ([\d,.]+) \|"),
        OracleStep(
            tool="pdf.read_tables", args=args, save_as="last", extract=rf"^\| {row_label} \|.* \| ([\d,.]+) \|$"
        ),
        compute("float('${last}'.replace(',', '')) - float('${first}'.replace(',', ''))", 2),
    ]


def write_cell(cell: CellFact, value: float | int | str) -> OracleStep:
    return OracleStep(
        tool="sheets.write_cell", args={"path": cell.path, "sheet": cell.sheet, "cell": cell.cell, "value": value}
    )
