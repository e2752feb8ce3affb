"""sheets: read and edit Excel workbooks (.xlsx) with openpyxl; formulas are computed with pycel.

Values shown are always COMPUTED from the formulas stored in the file (never Excel's cached results, which openpyxl
drops on save), so after ``write_cell`` every dependent formula reflects the new value on the next read. pycel's
``ExcelCompiler`` evaluates cross-sheet references and the common functions; ``envs.apps.sheet_functions`` adds the
ones it lacks (MEDIAN, STDEV, PRODUCT, PMT, IRR, ...).

A workbook is checked before openpyxl opens it (``envs.apps.office_files``: size, sheet extent, merged ranges), and a
formula range over more than ``MAX_RANGE_CELLS`` cells is refused before pycel builds every cell of it. Reads walk the
cells a sheet stores (``stored_cells``), never every coordinate of its used range.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
from pathlib import Path
from typing import Any

import openpyxl
from openpyxl.cell.cell import Cell
from openpyxl.formula import Tokenizer
from openpyxl.utils import column_index_from_string, quote_sheetname, range_boundaries
from openpyxl.workbook.workbook import Workbook
from openpyxl.worksheet.formula import ArrayFormula
from openpyxl.worksheet.worksheet import Worksheet
from pycel import ExcelCompiler

from envs.apps.base import ToolError, World, check_office_text, existing_file, open_with, tool
from envs.apps.office_files import MAX_RANGE_CELLS
from envs.files import atomic_write_bytes

APP = "sheets"
SUFFIXES = (".xlsx",)
PLUGINS = ("envs.apps.sheet_functions",)
MAX_CELLS_SHOWN = 2000
MAX_COLUMN, MAX_ROW = 16384, 1048576  # Excel's grid: XFD1048576
_CELL = re.compile(r"^\$?([A-Z]{1,3})\$?([0-9]{1,7})$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")

# pycel logs a traceback for every formula it cannot evaluate; we report those errors to the caller ourselves.
logging.getLogger("pycel").addHandler(logging.NullHandler())
logging.getLogger("pycel").propagate = False


class FormulaError(ToolError):
    """A formula that cannot be computed (unknown function, bad reference, circular reference...)."""

    def __init__(self, cell: str, formula: str, reason: str) -> None:
        super().__init__(f"cannot compute {cell} ({formula}): {reason}")
        self.reason = reason


def format_value(value: Any) -> str:
    """How a value is shown: numbers rounded to 10 significant digits, integral numbers without ".0", TRUE/FALSE."""
    if value is None:
        return "(empty)"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        rounded = float(f"{value:.10g}")
        return str(int(rounded)) if rounded.is_integer() and abs(rounded) < 1e15 else repr(rounded)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, tuple):  # an array result: rows of values
        return "; ".join(", ".join(format_value(v) for v in row) for row in value)
    return str(value)


def _is_formula(raw: Any) -> bool:
    return isinstance(raw, ArrayFormula) or (isinstance(raw, str) and raw.startswith("="))


def _formula_text(raw: Any) -> str:
    return f"{{{raw.text}}}" if isinstance(raw, ArrayFormula) else str(raw)


def _cell_ref(cell: str) -> str:
    """Normalise a single-cell reference ("c5", "$C$5" -> "C5") or raise a ToolError saying what is wrong."""
    if "!" in cell:
        raise ToolError(f"bad cell {cell!r}: pass the sheet name in 'sheet' and only the cell (e.g. C5) in 'cell'")
    match = _CELL.match(cell.strip().upper())
    if not match:
        raise ToolError(f"bad cell reference {cell!r}: use a column letter and row number, e.g. C5")
    column, row = column_index_from_string(match[1]), int(match[2])
    if not (1 <= column <= MAX_COLUMN and 1 <= row <= MAX_ROW):
        raise ToolError(f"bad cell reference {cell!r}: outside the sheet (A1 to XFD1048576)")
    return f"{match[1]}{row}"


def _range_bounds(cell_range: str) -> tuple[int, int, int, int]:
    """(min_col, min_row, max_col, max_row) of "A1:C5" or a single cell "B2"."""
    corners = [_cell_ref(part) for part in cell_range.split(":")]
    if len(corners) > 2:
        raise ToolError(f"bad range {cell_range!r}: use two corners, e.g. A1:F20")
    min_col, min_row, max_col, max_row = range_boundaries(":".join(corners))
    return min(min_col, max_col), min(min_row, max_row), max(min_col, max_col), max(min_row, max_row)


def stored_cells(ws: Worksheet, bounds: tuple[int, int, int, int] | None = None) -> list[Cell]:
    """The cells ``ws`` stores (within ``(min_col, min_row, max_col, max_row)`` when given), row by row.

    Walking ``iter_rows`` instead would create a cell for every coordinate of the used range: a sheet holding only
    A1 and XFD1048576 would cost 17 billion of them.
    """
    keys = ws._cells.keys()  # openpyxl's own map of the stored cells: it has no public view of it
    if bounds is not None:
        min_col, min_row, max_col, max_row = bounds
        keys = [(r, c) for r, c in keys if min_row <= r <= max_row and min_col <= c <= max_col]
    return [ws._cells[key] for key in sorted(keys)]


def _range_cells(ref: str, rows: int, columns: int) -> int:
    """How many cells pycel builds for the range operand ``ref`` (``Sheet!A1:C5``, ``B:B``, ``3:4``): a range spanning
    all rows or all columns is cut to the used ``rows`` / ``columns``, as pycel does; 0 for a name."""
    try:
        min_col, min_row, max_col, max_row = range_boundaries(ref.rpartition("!")[2].replace("$", ""))
    except (ValueError, TypeError):
        return 0
    height = max_row - min_row + 1 if min_row is not None and max_row is not None else MAX_ROW
    width = max_col - min_col + 1 if min_col is not None and max_col is not None else MAX_COLUMN
    if height == MAX_ROW or width == MAX_COLUMN:
        return min(height, rows) * min(width, columns)
    return height * width


class Book:
    """An opened workbook: formulas as stored, plus a lazily built pycel evaluator for computed values."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.workbook: Workbook = open_with(openpyxl.load_workbook, file, "an Excel workbook")
        self._compiler: ExcelCompiler | None = None
        self._oversized: str | None = None

    def _oversized_range(self) -> str | None:
        """Why pycel must not evaluate this workbook: a formula range over ``MAX_RANGE_CELLS`` cells (pycel builds
        every cell of every range it meets, and a formula may depend on one anywhere in the workbook)."""
        sheets = self.workbook.worksheets
        rows, columns = max(ws.max_row for ws in sheets), max(ws.max_column for ws in sheets)
        for ws in sheets:
            for cell in stored_cells(ws):
                if not _is_formula(cell.value):
                    continue
                text = _formula_text(cell.value).strip("{}")
                try:
                    operands = [t.value for t in Tokenizer(text).items if t.type == "OPERAND" and t.subtype == "RANGE"]
                except Exception:  # an untokenizable formula is pycel's to report
                    continue
                for ref in operands:
                    if (size := _range_cells(ref, rows, columns)) > MAX_RANGE_CELLS:
                        return (
                            f"the formula of {ws.title}!{cell.coordinate} ({text}) covers {size} cells in {ref} (limit "
                            f"{MAX_RANGE_CELLS}): narrow the range"
                        )
        return None

    def sheet(self, name: str) -> Worksheet:
        """The worksheet called ``name`` (exact, else the unique case-insensitive match)."""
        names = self.workbook.sheetnames
        if name in names:
            return self.workbook[name]
        folded = [n for n in names if n.casefold() == name.strip().casefold()]
        if len(folded) == 1:
            return self.workbook[folded[0]]
        raise ToolError(f"no sheet {name!r} in {self.file.name}; sheets are: {', '.join(names)}")

    def computed(self, sheet: Worksheet, cell: str) -> Any:
        """The value of ``cell``: the constant stored there, or its formula computed by pycel."""
        raw = sheet[cell].value
        if not _is_formula(raw):
            return raw
        if self._compiler is None:
            self._oversized = self._oversized_range()
            self._compiler = ExcelCompiler(excel=self.workbook, plugins=PLUGINS)
        if self._oversized is not None:
            raise FormulaError(f"{sheet.title}!{cell}", _formula_text(raw), self._oversized)
        try:
            return self._compiler.evaluate(f"{quote_sheetname(sheet.title)}!{cell}")
        except Exception as error:  # pycel raises many types (UnknownFunction, FormulaEvalError, RecursionError...)
            reason = [line for line in str(error).splitlines() if line.strip()][-1:] or [type(error).__name__]
            raise FormulaError(f"{sheet.title}!{cell}", _formula_text(raw), reason[0].strip()) from error

    def save(self) -> None:
        buffer = io.BytesIO()
        self.workbook.save(buffer)
        atomic_write_bytes(self.file, buffer.getvalue())


def _plain(value: Any) -> float | int | str | None:
    """A computed value as a plain Python scalar: dates as ISO text, arrays as text, numpy numbers as Python ones."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.datetime | dt.date | dt.time | tuple):
        return format_value(value)
    if hasattr(value, "item"):  # numpy scalar
        return value.item()
    return str(value)


def computed_value(file: Path, sheet: str, cell: str) -> float | int | str | None:
    """The computed value of ``sheet!cell`` in the workbook ``file`` (for graders); raises ToolError when it cannot."""
    book = Book(file)
    return _plain(book.computed(book.sheet(sheet), _cell_ref(cell)))


def _open(world: World, path: str) -> Book:
    return Book(existing_file(world, path, SUFFIXES))


@tool(APP)
def list_sheets(world: World, path: str) -> str:
    """List the worksheets of an Excel workbook (.xlsx) with the range each one uses.

    Args:
        path: .xlsx file path relative to the filesystem root.

    Returns one "Name (A1:F20)" line per sheet, in workbook order.
    """
    book = _open(world, path)
    return "\n".join(f"{ws.title} ({ws.dimensions})" for ws in book.workbook.worksheets)


@tool(APP)
def read_sheet(world: World, path: str, sheet: str, cell_range: str | None = None) -> str:
    """Read the computed values of a worksheet, or of a range of it.

    Args:
        path: .xlsx file path relative to the filesystem root.
        sheet: worksheet name (see list_sheets).
        cell_range: optional range such as "A1:F20" or a single cell; default the whole used range of the sheet.

    Returns one line per non-empty row: "A1=Revenue | B1=412.5 | ...". Formulas are shown as their computed values
    (a cell whose formula cannot be computed shows "#ERROR(reason)"); use read_formula to see a formula. Empty cells
    are left out; at most 2000 cells are shown.
    """
    book = _open(world, path)
    ws = book.sheet(sheet)
    bounds = _range_bounds(cell_range or ws.dimensions)
    rows: dict[int, list[str]] = {}
    shown = 0
    for stored in stored_cells(ws, bounds):
        if shown >= MAX_CELLS_SHOWN and stored.row not in rows:
            rows[-1] = [f"[stopped after {shown} cells at row {max(rows)}: pass a smaller cell_range to see the rest]"]
            break
        try:
            value = book.computed(ws, stored.coordinate)
        except FormulaError as error:
            value = f"#ERROR({error.reason})"
        if value is not None and value != "":
            rows.setdefault(stored.row, []).append(f"{stored.coordinate}={format_value(value)}")
            shown += 1
    lines = [" | ".join(cells) for cells in rows.values()]
    where = f"{ws.title}!{cell_range}" if cell_range else f"sheet {ws.title!r}"
    return "\n".join(lines) if lines else f"(no values in {where})"


@tool(APP)
def read_cell(world: World, path: str, sheet: str, cell: str) -> str:
    """Read the computed value of one cell.

    Args:
        path: .xlsx file path relative to the filesystem root.
        sheet: worksheet name (see list_sheets).
        cell: cell reference such as "C5".

    Returns the value alone, e.g. "412.5": numbers rounded to 10 significant digits and whole numbers without ".0",
    TRUE/FALSE for booleans, "(empty)" for an empty cell. A formula is computed; use read_formula to see the formula.
    """
    book = _open(world, path)
    return format_value(book.computed(book.sheet(sheet), _cell_ref(cell)))


@tool(APP)
def read_formula(world: World, path: str, sheet: str, cell: str) -> str:
    """Read what is stored in one cell: its formula (e.g. "=SUM(C3:C4)"), or the constant when it holds no formula.

    Args:
        path: .xlsx file path relative to the filesystem root.
        sheet: worksheet name (see list_sheets).
        cell: cell reference such as "C5".
    """
    book = _open(world, path)
    raw = book.sheet(sheet)[_cell_ref(cell)].value
    return _formula_text(raw) if _is_formula(raw) else format_value(raw)


def _cell_input(value: str | float | int) -> str | float | int:
    """What to store for a written value: text that reads as a plain number becomes that number, as when typed."""
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value)
        return int(number) if number.is_integer() and re.fullmatch(r"[+-]?\d+", value.strip()) else number
    return value


@tool(APP)
def write_cell(world: World, path: str, sheet: str, cell: str, value: str | float | int) -> str:
    """Write a value or a formula into one cell and save the workbook; every other cell and formula is kept.

    Args:
        path: .xlsx file path relative to the filesystem root.
        sheet: worksheet name (see list_sheets).
        cell: cell reference such as "C7".
        value: a number; or text — text starting with "=" is stored as a formula (e.g. "=SUM(C3:C6)"), text that is
            a plain number ("12.5") is stored as that number, anything else as text.

    Returns "Sheet!C7 = VALUE" (for a formula also its computed value). Formulas that depend on the cell show the new
    result on the next read.
    """
    if isinstance(value, str):
        check_office_text("value", value)
    book = _open(world, path)
    ws = book.sheet(sheet)
    ref = _cell_ref(cell)
    previous = ws[ref].value
    stored = _cell_input(value)
    ws[ref].value = stored
    book.save()
    shown = f"{ws.title}!{ref} = {format_value(stored) if not _is_formula(stored) else stored}"
    if _is_formula(stored):
        try:
            shown += f" (computed: {format_value(book.computed(ws, ref))})"
        except FormulaError as error:
            shown += f" (saved, but {error})"
    if _is_formula(previous) and not _is_formula(stored):
        shown += f" (replaced the formula {_formula_text(previous)})"
    return shown
