"""docs: read, create and edit Word documents (.docx) with python-docx."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import docx
from docx.document import Document
from docx.table import Table
from docx.text.paragraph import Paragraph
from pydantic import Field

from envs.apps.base import ToolError, World, check_office_text, existing_file, open_with, tool
from envs.files import atomic_write_bytes

APP = "docs"
SUFFIXES = (".docx",)


def _load(file: Path) -> Document:
    return open_with(docx.Document, file, "a Word document")


def _save(document: Document, file: Path) -> None:
    buffer = io.BytesIO()
    document.save(buffer)
    atomic_write_bytes(file, buffer.getvalue())


def _row_text(cells: list[str]) -> str:
    return "| " + " | ".join(" ".join(c.split()) for c in cells) + " |"


def _all_paragraphs(document: Document) -> Iterator[Paragraph]:
    """Every paragraph of the body, including those inside table cells (nested tables too), each once.

    A merged cell appears once per grid position it spans in ``row.cells``, hence the de-duplication. ``seen`` keeps
    the cell elements alive so that their ids stay unique while we iterate.
    """
    seen: dict[int, object] = {}

    def in_table(table: Table) -> Iterator[Paragraph]:
        for row in table.rows:
            for cell in row.cells:
                if id(cell._tc) in seen:
                    continue
                seen[id(cell._tc)] = cell._tc
                yield from cell.paragraphs
                for inner in cell.tables:
                    yield from in_table(inner)

    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            yield block
        else:
            yield from in_table(block)


def _heading_marker(paragraph: Paragraph) -> str:
    """ "# " for a Title or Heading 1, "## " for Heading 2, ...; "" for body text."""
    style = paragraph.style.name if paragraph.style is not None else ""
    if style == "Title":
        return "# "
    level = style.removeprefix("Heading ").strip()
    return "#" * int(level) + " " if style.startswith("Heading ") and level.isdigit() else ""


def document_text(file: Path) -> str:
    """All text of a .docx for graders: non-empty paragraphs and table cells, newline separated, in document order."""
    lines: list[str] = []
    for block in _load(file).iter_inner_content():
        if isinstance(block, Paragraph):
            lines.append(block.text)
        else:
            lines += [cell.text for row in block.rows for cell in row.cells]
    return "\n".join(line for line in lines if line.strip())


@tool(APP)
def read_document(world: World, path: str) -> str:
    """Read a Word document (.docx): its paragraphs and tables in order.

    Args:
        path: .docx file path relative to the filesystem root.

    Returns one paragraph per line (headings prefixed with "#", "##", ...); each table is rendered as rows of
    "| cell | cell |". Empty paragraphs are skipped.
    """
    file = existing_file(world, path, SUFFIXES)
    lines: list[str] = []
    for block in _load(file).iter_inner_content():
        if isinstance(block, Paragraph):
            if block.text.strip():
                lines.append(_heading_marker(block) + block.text)
        else:
            lines += [_row_text([cell.text for cell in row.cells]) for row in block.rows]
    return "\n".join(lines) if lines else f"(document {path!r} is empty)"


@tool(APP)
def create_document(world: World, path: str, title: str, paragraphs: list[str]) -> str:
    """Create a new Word document (or overwrite an existing one) with a title and body paragraphs.

    Args:
        path: .docx file path relative to the filesystem root (parent folders are created).
        title: the document title, written as a Title-styled first paragraph.
        paragraphs: the body paragraphs in order, one string each.

    Returns "created PATH (N paragraphs)", N counting the body paragraphs.
    """
    file = world.path(path)
    if file.suffix.lower() not in SUFFIXES:
        raise ToolError(f"{path!r} must end in .docx to be a Word document")
    check_office_text("title", title)
    check_office_text("paragraphs", *paragraphs)
    document = docx.Document()
    document.add_heading(title, level=0)
    for text in paragraphs:
        document.add_paragraph(text)
    _save(document, file)
    return f"created {world.rel(file)} ({len(paragraphs)} paragraphs)"


@tool(APP)
def append_paragraph(world: World, path: str, text: str) -> str:
    """Append one paragraph at the end of an existing Word document.

    Args:
        path: .docx file path relative to the filesystem root.
        text: the paragraph text.

    Returns "appended paragraph to PATH (now N paragraphs)".
    """
    file = existing_file(world, path, SUFFIXES)
    check_office_text("text", text)
    document = _load(file)
    document.add_paragraph(text)
    _save(document, file)
    return f"appended paragraph to {world.rel(file)} (now {len(document.paragraphs)} paragraphs)"


def _replace_in_paragraph(paragraph: Paragraph, old: str, new: str) -> int:
    """Replace ``old`` by ``new`` in a paragraph and return the count.

    Word splits text into runs at every formatting change, so a match can straddle runs. When every match lies inside
    one run, runs are edited in place (formatting kept); otherwise the paragraph is rewritten as one plain run.
    """
    count = paragraph.text.count(old)
    if count == 0:
        return 0
    runs = paragraph.runs
    if sum(run.text.count(old) for run in runs) == count:
        for run in runs:
            run.text = run.text.replace(old, new)
    else:
        paragraph.text = paragraph.text.replace(old, new)
    return count


@tool(APP)
def replace_text(world: World, path: str, old: Annotated[str, Field(min_length=1)], new: str) -> str:
    """Replace every occurrence of a text in a Word document (body paragraphs and table cells), case-sensitive.

    Args:
        path: .docx file path relative to the filesystem root.
        old: the exact text to find (within one paragraph).
        new: the replacement text ("" deletes).

    Returns "replaced N occurrence(s) of OLD in PATH"; fails when the text does not occur.
    """
    file = existing_file(world, path, SUFFIXES)
    check_office_text("new", new)
    document = _load(file)
    count = sum(_replace_in_paragraph(p, old, new) for p in _all_paragraphs(document))
    if count == 0:
        raise ToolError(f"{old!r} does not occur in {world.rel(file)} (matching is case-sensitive; see read_document)")
    _save(document, file)
    return f"replaced {count} occurrence(s) of {old!r} in {world.rel(file)}"
