"""pdf: two-column pages read column by column, page selection, tables, errors, path escapes."""

from __future__ import annotations

from collections.abc import Callable

import pdfplumber
import pytest

from envs.apps import ToolError, World, call_tool

REPORT = "reports/report.pdf"


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"pdf.{op}", {"path": REPORT} | args)


def test_two_columns_are_read_left_then_right(world: World) -> None:
    text = run(world, "read_pdf", pages="1")
    assert text.startswith("--- page 1 ---\nAnnual Report of Falcon Holdings\nLEFT-1 ")
    positions = [text.index(f"LEFT-{i} ") for i in range(1, 9)] + [text.index(f"RIGHT-{i} ") for i in range(1, 9)]
    assert positions == sorted(positions)
    assert "--- page 2 ---" not in text


def test_plain_extraction_would_interleave(world: World) -> None:
    # The failure read_pdf exists to avoid: pdfplumber's plain text puts RIGHT-1 on the same line as LEFT-1.
    with pdfplumber.open(world.path(REPORT)) as pdf:
        plain = pdf.pages[0].extract_text()
    assert plain.index("RIGHT-1 ") < plain.index("LEFT-2 ")


def test_single_column_page_with_table_keeps_its_order(world: World) -> None:
    text = run(world, "read_pdf", pages="2")
    lines = text.splitlines()
    assert lines[:2] == ["--- page 2 ---", "Revenue by company"]
    assert text.index("FULL-1") < text.index("FULL-2") < text.index("Acme 412.5")
    assert all(run(world, "read_pdf").count(f"--- page {n} ---") == 1 for n in (1, 2))


def test_read_tables(world: World) -> None:
    assert run(world, "read_tables", page=2) == "Table 1:\n| Company | Revenue |\n| Acme | 412.5 |\n| Beta | 99 |"
    assert run(world, "read_tables", page=1).startswith("no tables found on page 1")


@pytest.mark.parametrize(
    ("pages", "message"), [("3", "out of range"), ("0", "out of range"), ("one", "bad pages"), ("2-1", "out of range")]
)
def test_bad_page_selection(world: World, pages: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        run(world, "read_pdf", pages=pages)


def test_read_tables_bad_page(world: World) -> None:
    with pytest.raises(ToolError, match=r"has 2 page"):
        run(world, "read_tables", page=3)
    with pytest.raises(ToolError, match=r"argument 'page'"):
        run(world, "read_tables", page=0)
    with pytest.raises(ToolError, match=r"argument 'page'"):
        run(world, "read_tables", page="second")


def test_missing_and_wrong_files(world: World) -> None:
    with pytest.raises(ToolError, match=r"no file 'reports/annual.pdf'.*report.pdf"):
        call_tool(world, "pdf.read_pdf", {"path": "reports/annual.pdf"})
    with pytest.raises(ToolError, match=r"not a .pdf file.*docs.read_document"):
        call_tool(world, "pdf.read_pdf", {"path": "docs/memo.docx"})
    (world.fs_root / "reports" / "broken.pdf").write_text("not a pdf")
    with pytest.raises(ToolError, match=r"cannot open broken.pdf as a PDF"):
        call_tool(world, "pdf.read_pdf", {"path": "reports/broken.pdf"})


def test_paths_cannot_leave_the_world(world: World, escaping_path: Callable[[str], str]) -> None:
    with pytest.raises(ToolError, match=r"absolute paths are not allowed|path leaves the world root"):
        call_tool(world, "pdf.read_tables", {"path": escaping_path(".pdf"), "page": 1})


@pytest.mark.parametrize("seed", range(6))
def test_ragged_right_columns_are_read_in_order(tmp_path, seed: int) -> None:
    """Left-aligned (ragged-right) paragraphs of random lengths: lines end anywhere inside the left column."""
    import random

    from reportlab.lib.pagesizes import letter
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import BaseDocTemplate, Frame, FrameBreak, PageTemplate, Paragraph

    from envs.apps.pdf import page_text

    rng = random.Random(seed)
    vocabulary = [
        "revenue",
        "grew",
        "strongly",
        "in",
        "the",
        "period",
        "while",
        "margins",
        "expanded",
        "as",
        "synergies",
        "delivered",
        "value",
    ]
    styles = getSampleStyleSheet()
    width, height = letter
    margin, gap = 54, 24
    column = (width - 2 * margin - gap) / 2
    frames = [
        Frame(margin, height - margin - 50, width - 2 * margin, 50),
        Frame(margin, margin, column, height - 2 * margin - 60),
        Frame(margin + column + gap, margin, column, height - 2 * margin - 60),
    ]
    doc = BaseDocTemplate(str(tmp_path / "r.pdf"), pagesize=letter, invariant=1)
    doc.addPageTemplates([PageTemplate("columns", frames)])

    def paragraph(tag: str) -> Paragraph:
        return Paragraph(f"{tag} " + " ".join(rng.choices(vocabulary, k=rng.randint(3, 40))), styles["BodyText"])

    story = [Paragraph("Title", styles["Title"]), FrameBreak()]
    story += [paragraph(f"L{i}X") for i in range(8)] + [FrameBreak()] + [paragraph(f"R{i}X") for i in range(8)]
    doc.build(story)
    with pdfplumber.open(tmp_path / "r.pdf") as pdf:
        text = page_text(pdf.pages[0])
    positions = [text.find(f"{side}{i}X") for side in "LR" for i in range(8)]
    assert -1 not in positions and positions == sorted(positions)
