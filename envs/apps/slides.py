"""slides: read PowerPoint decks (.pptx) and add slides, with python-pptx."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

from pptx import Presentation
from pptx.enum.shapes import MSO_SHAPE_TYPE, PP_PLACEHOLDER
from pptx.presentation import Presentation as Deck
from pptx.shapes.base import BaseShape
from pptx.slide import Slide, SlideLayout
from pptx.util import Inches, Pt

from envs.apps.base import ToolError, World, check_office_text, existing_file, open_with, tool
from envs.files import atomic_write_bytes

APP = "slides"
SUFFIXES = (".pptx",)
_TITLE_TYPES = {PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE}
_BODY_TYPES = {PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT}


def _load(file: Path) -> Deck:
    return open_with(Presentation, file, "a PowerPoint deck")


def _shapes(shapes: Iterator[BaseShape]) -> Iterator[BaseShape]:
    """Shapes in order, with group shapes opened up."""
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shapes(iter(shape.shapes))
        else:
            yield shape


def _title(slide: Slide) -> BaseShape | None:
    title = slide.shapes.title
    return title if title is not None and title.has_text_frame and title.text_frame.text.strip() else None


def _shape_lines(shape: BaseShape) -> list[str]:
    """The text of a shape: one line per non-empty paragraph, or "| a | b |" rows for a table."""
    if shape.has_text_frame:
        return [
            "  " * p.level + "- " + p.text if p.level else p.text for p in shape.text_frame.paragraphs if p.text.strip()
        ]
    if getattr(shape, "has_table", False):
        return ["| " + " | ".join(" ".join(c.text.split()) for c in row.cells) + " |" for row in shape.table.rows]
    return []


def _slide_body(slide: Slide) -> list[str]:
    """The lines of every shape but the title (python-pptx returns a new proxy per access: compare shape ids)."""
    title = _title(slide)
    title_id = title.shape_id if title is not None else None
    return [line for shape in _shapes(iter(slide.shapes)) if shape.shape_id != title_id for line in _shape_lines(shape)]


def deck_text(file: Path) -> str:
    """All text of a .pptx for graders: titles, text boxes and table cells of every slide, newline separated."""
    lines: list[str] = []
    for slide in _load(file).slides:
        for shape in _shapes(iter(slide.shapes)):
            if shape.has_text_frame:
                lines.append(shape.text_frame.text)
            elif getattr(shape, "has_table", False):
                lines += [cell.text for row in shape.table.rows for cell in row.cells]
    return "\n".join(line for line in lines if line.strip())


@tool(APP)
def read_deck(world: World, path: str) -> str:
    """Read every slide of a PowerPoint deck (.pptx).

    Args:
        path: .pptx file path relative to the filesystem root.

    Returns for each slide a "Slide N: title" line, then the text of its other shapes (one line per paragraph,
    indented bullets as "- ...") and its tables as "| cell | cell |" rows, then its speaker notes if any.
    """
    file = existing_file(world, path, SUFFIXES)
    deck = _load(file)
    blocks: list[str] = []
    for number, slide in enumerate(deck.slides, start=1):
        title = _title(slide)
        lines = [f"Slide {number}: {title.text_frame.text.strip() if title else '(no title)'}", *_slide_body(slide)]
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame.text.strip():
            lines.append(f"Notes: {slide.notes_slide.notes_text_frame.text.strip()}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else f"(the deck {path!r} has no slides)"


def _layout(deck: Deck) -> SlideLayout:
    """The first layout with a title and a body placeholder ("Title and Content"), else the first with a title."""
    layouts = list(deck.slide_layouts)

    def kinds(layout: SlideLayout) -> set[PP_PLACEHOLDER]:
        return {p.placeholder_format.type for p in layout.placeholders}

    for wanted in (lambda k: bool(k & _TITLE_TYPES and k & _BODY_TYPES), lambda k: bool(k & _TITLE_TYPES)):
        found = next((layout for layout in layouts if wanted(kinds(layout))), None)
        if found is not None:
            return found
    return layouts[-1]


def _fill(slide: Slide, title: str, bullets: list[str]) -> None:
    """Write the title and bullets into the slide's placeholders, or into new text boxes when the layout lacks them."""
    placeholders = {p.placeholder_format.type: p for p in slide.placeholders}
    title_shape = next((placeholders[t] for t in _TITLE_TYPES if t in placeholders), None)
    if title_shape is None:
        title_shape = slide.shapes.add_textbox(Inches(0.5), Inches(0.3), Inches(9), Inches(1))
        title_shape.text_frame.paragraphs[0].font.size = Pt(32)
    title_shape.text_frame.text = title
    if not bullets:
        return
    body = next((placeholders[t] for t in _BODY_TYPES if t in placeholders), None)
    if body is None:
        body = slide.shapes.add_textbox(Inches(0.5), Inches(1.5), Inches(9), Inches(5))
    frame = body.text_frame
    frame.text = bullets[0]
    for bullet in bullets[1:]:
        frame.add_paragraph().text = bullet


@tool(APP)
def add_slide(world: World, path: str, title: str, bullets: list[str]) -> str:
    """Add a title-and-bullets slide at the end of a PowerPoint deck; a missing deck is created.

    Args:
        path: .pptx file path relative to the filesystem root.
        title: the slide title.
        bullets: the bullet points in order, one string each (may be empty).

    Returns "added slide N to PATH", N being the new slide's 1-based number.
    """
    file = world.path(path)
    if file.suffix.lower() not in SUFFIXES:
        raise ToolError(f"{path!r} must end in .pptx to be a PowerPoint deck")
    check_office_text("title", title)
    check_office_text("bullets", *bullets)
    deck = _load(existing_file(world, path, SUFFIXES)) if file.exists() else Presentation()
    slide = deck.slides.add_slide(_layout(deck))
    _fill(slide, title, bullets)
    buffer = io.BytesIO()
    deck.save(buffer)
    atomic_write_bytes(file, buffer.getvalue())
    return f"added slide {len(deck.slides)} to {world.rel(file)}"
