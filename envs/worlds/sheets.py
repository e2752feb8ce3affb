"""Worksheets as cells and their ground truth: ``SheetBuilder`` writes a sheet's cells and records, for the cells a
task may ask about, the ``CellFact`` with the value its formula computes."""

from __future__ import annotations

from datetime import date

from envs.worlds.facts import CellFact
from envs.worlds.render import SheetSpec


class SheetBuilder:
    """Collects one worksheet's cells and, for the cells a task may ask about, their ground-truth ``CellFact``.

    ``put(address, value, fact=..., computed=...)``: ``value`` is what is written (a constant or an ``=`` formula);
    ``computed`` is the value the formula evaluates to, computed in Python from the same inputs (required for a
    formula that is recorded as a fact). A sheet with a ``title`` opens with it, in bold, in A1.
    """

    def __init__(self, path: str, name: str, facts: dict[str, CellFact], title: str | None = None) -> None:
        self.path, self.name, self._facts = path, name, facts
        self.cells: dict[str, object] = {}
        self.number_formats: dict[str, str] = {}
        self.bold: list[str] = []
        if title is not None:
            self.put("A1", title, bold=True)

    def put(
        self,
        address: str,
        value: object,
        *,
        fact: str | None = None,
        label: str = "",
        computed: float | int | str | None = None,
        unit: str = "",
        number_format: str | None = None,
        bold: bool = False,
    ) -> None:
        self.cells[address] = value
        if number_format:
            self.number_formats[address] = number_format
        if bold:
            self.bold.append(address)
        if fact is None:
            return
        is_formula = isinstance(value, str) and value.startswith("=")
        if is_formula and computed is None:
            raise ValueError(f"fact {fact!r} ({self.name}!{address}) is a formula: pass its computed value")
        if fact in self._facts:
            raise ValueError(f"fact {fact!r} recorded twice")
        self._facts[fact] = CellFact(
            label=label,
            path=self.path,
            sheet=self.name,
            cell=address,
            # A date cell's fact is its ISO date: the sheets app shows it as that date (at midnight).
            value=computed if is_formula else value.isoformat() if isinstance(value, date) else value,  # type: ignore
            formula=value if is_formula else None,  # type: ignore[arg-type]
            unit=unit,
        )

    def inputs(self, rows: list[tuple[int, str, str, object]]) -> None:
        """Labelled inputs, one per ``(row, key, label, value)``: the label in column A, the value in B, recorded as
        fact ``key`` under the same label (what a task quotes back is what the sheet says)."""
        for row, key, label, value in rows:
            self.put(f"A{row}", label)
            self.put(f"B{row}", value, fact=key, label=label)

    def formulas(self, rows: list[tuple[int, str, str, str, float | int]]) -> None:
        """Labelled formulas, one per ``(row, key, label, formula, computed)``: like ``inputs``, with the formula in
        column B and its computed value as the fact."""
        for row, key, label, formula, computed in rows:
            self.put(f"A{row}", label)
            self.put(f"B{row}", formula, fact=key, label=label, computed=computed)

    def row(self, row: int, values: list[object], first_column: int = 1, bold: bool = False) -> None:
        """Write ``values`` left to right from ``first_column`` (1 = A) in ``row``, no facts recorded."""
        for offset, value in enumerate(values):
            self.put(f"{column_letter(first_column + offset)}{row}", value, bold=bold)

    def spec(self, widths: dict[str, float] | None = None) -> SheetSpec:
        return SheetSpec(self.name, dict(self.cells), dict(self.number_formats), tuple(self.bold), widths or {})


def column_letter(index: int) -> str:
    """1 → A, 27 → AA."""
    letters = ""
    while index:
        index, remainder = divmod(index - 1, 26)
        letters = chr(ord("A") + remainder) + letters
    return letters
