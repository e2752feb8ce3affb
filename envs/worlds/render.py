"""Render content specs into real office files, byte-for-byte reproducibly.

The domain modules describe *what* a file says (``WorkbookSpec``, ``DocSpec``, ``DeckSpec``, ``PdfSpec``); this module
decides *how* it is written. Reproducibility: office files are zip archives whose entries carry the wall-clock time
and whose ``docProps/core.xml`` carries created/modified stamps, so every archive is re-packed with a fixed entry time
and fixed core-property dates; pdfs are written with reportlab's ``invariant=1`` (no timestamp, fixed document id).
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pptx
from openpyxl.styles import Font
from pptx.util import Inches, Pt
from reportlab.lib import colors
from reportlab.lib.enums import TA_JUSTIFY
from reportlab.lib.pagesizes import LETTER
from reportlab.lib.styles import ParagraphStyle, getSampleStyleSheet
from reportlab.lib.units import inch
from reportlab.platypus import (
    BaseDocTemplate,
    Frame,
    FrameBreak,
    NextPageTemplate,
    PageBreak,
    PageTemplate,
    Paragraph,
    Spacer,
    Table,
    TableStyle,
)

from envs.files import atomic_write_bytes

FIXED_TIME = datetime(2026, 1, 5, 9, 0, 0)
"""The created/modified stamp of every generated office file (and the zip entry time)."""

_ZIP_TIME = FIXED_TIME.timetuple()[:6]
_CORE_DATE = re.compile(rb"(<dcterms:(created|modified)[^>]*>)[^<]*(</dcterms:\2>)")


# --- specs -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SheetSpec:
    """One worksheet: ``cells`` maps an A1 address to a constant or a formula string starting with ``=``."""

    name: str
    cells: dict[str, Any]
    number_formats: dict[str, str] = field(default_factory=dict)
    bold: tuple[str, ...] = ()
    widths: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WorkbookSpec:
    path: str
    sheets: list[SheetSpec]


Rows = list[list[str]]
"""A table as rows of cell strings, header row first."""


@dataclass(frozen=True)
class DocSpec:
    """A Word document: a title, then blocks in order (a ``str`` is a paragraph, a list of rows is a table)."""

    path: str
    title: str
    blocks: list[str | Rows]


@dataclass(frozen=True)
class SlideSpec:
    title: str
    bullets: list[str] = field(default_factory=list)
    table: Rows | None = None


@dataclass(frozen=True)
class DeckSpec:
    path: str
    slides: list[SlideSpec]


@dataclass(frozen=True)
class PdfSpec:
    """A three-page report: a summary page, a two-column page (left then right column) and a ruled table page."""

    path: str
    title: str
    summary: list[str]
    columns_heading: str
    left_column: list[str]
    right_column: list[str]
    table_heading: str
    table: Rows


# --- writing ---------------------------------------------------------------------------------------------------------


def write_json(target: Path, payload: Any) -> None:
    atomic_write_bytes(target, (json.dumps(payload, indent=2, ensure_ascii=False) + "\n").encode())


def normalize_ooxml(data: bytes) -> bytes:
    """Re-pack an office zip with a fixed entry time and fixed core-property dates (same content, same bytes)."""
    stamp = FIXED_TIME.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            payload = source.read(info.filename)
            if info.filename == "docProps/core.xml":
                payload = _CORE_DATE.sub(lambda m: m.group(1) + stamp + m.group(3), payload)
            entry = zipfile.ZipInfo(info.filename, date_time=_ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            target.writestr(entry, payload)
    return out.getvalue()


def _save_office(document: Any, target: Path) -> None:
    buffer = io.BytesIO()
    document.save(buffer)
    atomic_write_bytes(target, normalize_ooxml(buffer.getvalue()))


def write_workbook(spec: WorkbookSpec, root: Path) -> None:
    book = openpyxl.Workbook()
    book.remove(book.active)
    for sheet_spec in spec.sheets:
        sheet = book.create_sheet(sheet_spec.name)
        for address, value in sheet_spec.cells.items():
            sheet[address] = value
        for address, number_format in sheet_spec.number_formats.items():
            sheet[address].number_format = number_format
        for address in sheet_spec.bold:
            sheet[address].font = Font(bold=True)
        for column, width in sheet_spec.widths.items():
            sheet.column_dimensions[column].width = width
    book.properties.creator = "rl-recipe world generator"
    _save_office(book, root / spec.path)


def write_document(spec: DocSpec, root: Path) -> None:
    document = docx.Document()
    document.core_properties.author = "rl-recipe world generator"
    document.core_properties.title = spec.title
    document.add_heading(spec.title, level=1)
    for block in spec.blocks:
        if isinstance(block, str):
            document.add_paragraph(block)
            continue
        table = document.add_table(rows=len(block), cols=len(block[0]))
        table.style = "Table Grid"
        for row_index, row in enumerate(block):
            for column_index, text in enumerate(row):
                table.cell(row_index, column_index).text = text
    _save_office(document, root / spec.path)


def write_deck(spec: DeckSpec, root: Path) -> None:
    deck = pptx.Presentation()
    deck.core_properties.author = "rl-recipe world generator"
    title_layout, bullets_layout, title_only_layout = (
        deck.slide_layouts[0],
        deck.slide_layouts[1],
        deck.slide_layouts[5],
    )
    for index, slide_spec in enumerate(spec.slides):
        if index == 0:
            slide = deck.slides.add_slide(title_layout)
            slide.shapes.title.text = slide_spec.title
            slide.placeholders[1].text = "\n".join(slide_spec.bullets)
        elif slide_spec.table is None:
            slide = deck.slides.add_slide(bullets_layout)
            slide.shapes.title.text = slide_spec.title
            body = slide.placeholders[1].text_frame
            body.text = slide_spec.bullets[0] if slide_spec.bullets else ""
            for bullet in slide_spec.bullets[1:]:
                body.add_paragraph().text = bullet
        else:
            slide = deck.slides.add_slide(title_only_layout)
            slide.shapes.title.text = slide_spec.title
            rows, cols = len(slide_spec.table), len(slide_spec.table[0])
            shape = slide.shapes.add_table(rows, cols, Inches(0.5), Inches(1.6), Inches(9), Inches(0.4) * rows)
            for row_index, row in enumerate(slide_spec.table):
                for column_index, text in enumerate(row):
                    cell = shape.table.cell(row_index, column_index)
                    cell.text = text
                    cell.text_frame.paragraphs[0].font.size = Pt(14)
    _save_office(deck, root / spec.path)


def write_pdf(spec: PdfSpec, root: Path) -> None:
    """Page 1: summary (one frame). Page 2: heading frame over two column frames. Page 3: a ruled table."""
    styles = getSampleStyleSheet()
    body, heading = styles["BodyText"], styles["Heading2"]
    # Justified columns, as in typeset reports: straight column edges leave one clear gutter between them.
    column = ParagraphStyle("Column", parent=body, alignment=TA_JUSTIFY)
    width, height = LETTER
    margin, gutter = 0.75 * inch, 0.3 * inch
    column_width = (width - 2 * margin - gutter) / 2
    header_height = 0.9 * inch
    column_height = height - 2 * margin - header_height
    single = Frame(margin, margin, width - 2 * margin, height - 2 * margin, id="single")
    header = Frame(margin, height - margin - header_height, width - 2 * margin, header_height, id="header")
    left = Frame(margin, margin, column_width, column_height, id="left")
    right = Frame(margin + column_width + gutter, margin, column_width, column_height, id="right")
    buffer = io.BytesIO()
    document = BaseDocTemplate(
        buffer, pagesize=LETTER, title=spec.title, author="rl-recipe world generator", invariant=1
    )
    document.addPageTemplates(
        [PageTemplate(id="single", frames=[single]), PageTemplate(id="columns", frames=[header, left, right])]
    )
    story: list[Any] = [Paragraph(spec.title, styles["Title"])]
    story += [Paragraph(text, body) for text in spec.summary]
    story += [NextPageTemplate("columns"), PageBreak(), Paragraph(spec.columns_heading, heading), FrameBreak()]
    story += [Paragraph(text, column) for text in spec.left_column] + [FrameBreak()]
    story += [Paragraph(text, column) for text in spec.right_column]
    story += [NextPageTemplate("single"), PageBreak(), Paragraph(spec.table_heading, heading), Spacer(1, 12)]
    table = Table(spec.table)
    table.setStyle(
        TableStyle(
            [
                ("GRID", (0, 0), (-1, -1), 0.75, colors.black),
                ("FONTNAME", (0, 0), (-1, 0), "Helvetica-Bold"),
                ("ALIGN", (1, 1), (-1, -1), "RIGHT"),
            ]
        )
    )
    story.append(table)
    document.build(story)
    atomic_write_bytes(root / spec.path, buffer.getvalue())
