"""Limits on the office files (.xlsx .docx .pptx) the apps and graders open, checked before any parser sees them.

Those files are zip archives of XML a model can write itself (``code_exec``), and the parsers trust them: a few KiB can
unpack to gigabytes (a zip bomb), and a tiny sheet can make openpyxl build one object per cell of a huge range (a
merged range or a hyperlink over ``A1:XFD1048576``: 17 billion cells). ``check_office_file`` reads only the archive's
directory and, for a workbook, streams each sheet's XML once, and refuses with an ``OfficeFileError`` that says which
limit the file breaks:

- ``MAX_MEMBERS`` entries, ``MAX_UNPACKED_BYTES`` unpacked in all, ``MAX_XML_BYTES`` of them XML (what is parsed);
  the sizes in the zip directory bound what ``zipfile`` will ever inflate, so reading them is enough;
- per worksheet: ``MAX_SHEET_CELLS`` for the area from A1 to its farthest cell (formulas over whole columns are
  computed over that area), ``MAX_EXPANDED_CELLS`` for the cells merged ranges and range hyperlinks expand to.

``MAX_RANGE_CELLS`` bounds one range of a formula when it is computed (``envs.apps.sheets``): the evaluator builds
every cell of a range.

Example::

    check_office_file(Path("models/bomb.xlsx"))
    # OfficeFileError: bomb.xlsx: sheet xl/worksheets/sheet1.xml merges or links 17179869184 cells (limit 200000) ...
"""

from __future__ import annotations

import functools
import re
import zipfile
from pathlib import Path
from typing import IO
from xml.etree.ElementTree import ParseError, iterparse

from envs.files import open_regular

ZIP_SUFFIXES = (".xlsx", ".docx", ".pptx")
MAX_MEMBERS = 5_000
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
MAX_XML_BYTES = 32 * 1024 * 1024
MAX_SHEET_CELLS = 2_000_000
MAX_EXPANDED_CELLS = 200_000
MAX_RANGE_CELLS = 100_000
_MIB = 1024 * 1024
_XML_SUFFIXES = (".xml", ".rels", ".vml")
_REF = re.compile(r"^\$?([A-Za-z]{1,3})\$?([0-9]{1,7})$")


class OfficeFileError(ValueError):
    """An office file past one of the limits (or no regular file); the message names the file and the limit."""


def check_office_file(file: Path) -> None:
    """Refuse ``file`` before a parser opens it: not a regular file, or a zip-based office file past the limits.

    A file that is not a valid zip is left to the parser, whose own error says so.
    """
    with open_regular(file) as handle:
        if file.suffix.lower() not in ZIP_SUFFIXES:
            return
        try:
            archive = zipfile.ZipFile(handle)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return
        with archive:
            _check_archive(file.name, archive)
            if file.suffix.lower() == ".xlsx":
                for info in archive.infolist():
                    if info.filename.startswith("xl/worksheets/") and info.filename.endswith(".xml"):
                        with archive.open(info) as sheet:
                            _check_sheet(f"{file.name}: sheet {info.filename}", sheet)


def _check_archive(name: str, archive: zipfile.ZipFile) -> None:
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise OfficeFileError(f"{name} holds {len(infos)} archive entries (limit {MAX_MEMBERS}): write a simpler file")
    unpacked = sum(info.file_size for info in infos)
    xml = sum(info.file_size for info in infos if info.filename.lower().endswith(_XML_SUFFIXES))
    if unpacked > MAX_UNPACKED_BYTES or xml > MAX_XML_BYTES:
        raise OfficeFileError(
            f"{name} unpacks to {unpacked / _MIB:.1f} MiB, {xml / _MIB:.1f} MiB of it XML (limits "
            f"{MAX_UNPACKED_BYTES // _MIB} MiB and {MAX_XML_BYTES // _MIB} MiB): it is too large to open"
        )


def column_index(letters: str) -> int:
    """The 1-based index of a column's letters (A → 1, Z → 26, AA → 27): base-26 digits with no zero. Here and not
    openpyxl's, which would load all of openpyxl (0.6 s) into every tool call."""
    return functools.reduce(lambda index, letter: 26 * index + ord(letter) - ord("A") + 1, letters, 0)


def cell_position(ref: str) -> tuple[int, int] | None:
    """(row, column) of a cell reference such as ``C5`` or ``$AB$12``, or None when it is not one."""
    match = _REF.match(ref.strip())
    if match is None:
        return None
    return int(match[2]), column_index(match[1].upper())


def range_cells(ref: str) -> int:
    """How many cells ``A1:C5`` (or a single cell) spans; 0 for what is not a cell range."""
    corners = [cell_position(part) for part in ref.split(":")]
    if not corners or len(corners) > 2 or any(corner is None for corner in corners):
        return 0
    (row_a, col_a), (row_b, col_b) = corners[0], corners[-1]  # type: ignore[misc]
    return (abs(row_b - row_a) + 1) * (abs(col_b - col_a) + 1)


def _check_sheet(where: str, xml: IO[bytes]) -> None:
    """Stream one worksheet's XML: the farthest cell and the cells merged ranges and range hyperlinks expand to."""
    max_row = max_col = expanded = 0
    row = col = 0
    open_elements = []
    try:
        for event, element in iterparse(xml, events=("start", "end")):
            tag = element.tag.rsplit("}", 1)[-1]
            if event == "start":
                open_elements.append(element)
                if tag == "row":  # a row's number is on its start tag; its cells end before it does
                    number = element.get("r") or ""
                    row, col = (int(number) if number.isdigit() else row + 1), 0
                continue
            open_elements.pop()
            if tag == "c":
                position = cell_position(element.get("r", ""))
                row, col = position if position is not None else (max(row, 1), col + 1)
                max_row, max_col = max(max_row, row), max(max_col, col)
            elif tag in ("mergeCell", "hyperlink"):
                expanded += sum(range_cells(part) for part in (element.get("ref") or "").split())
                if expanded > MAX_EXPANDED_CELLS:
                    raise OfficeFileError(
                        f"{where} merges or links ranges of over {MAX_EXPANDED_CELLS} cells in all: use smaller ranges"
                    )
            if open_elements:  # drop what was read: memory stays flat however long the sheet
                open_elements[-1].remove(element)
    except ParseError:
        return  # openpyxl reports the broken XML itself
    if max_row * max_col > MAX_SHEET_CELLS:
        raise OfficeFileError(
            f"{where} spans {max_row} rows by {max_col} columns from A1 (over {MAX_SHEET_CELLS} cells): keep the "
            "data near A1"
        )
