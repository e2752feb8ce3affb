"""docs: read in order with tables, create, append, replace (incl. across runs), errors, path escapes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from envs.apps import ToolError, World, call_tool
from envs.apps.docs import document_text

MEMO = "docs/memo.docx"


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"docs.{op}", args)


def test_read_document_in_order_with_table(world: World) -> None:
    assert run(world, "read_document", path=MEMO).splitlines() == [
        "# Falcon memo",
        "The purchase price is $412.5m.",
        "Closing is expected in Q2.",
        "| Party | Role |",
        "| Acme | Buyer |",
        "Signed by Acme.",
    ]


def test_document_text_for_graders(world: World) -> None:
    text = document_text(world.path(MEMO))
    assert text.splitlines() == [
        "Falcon memo",
        "The purchase price is $412.5m.",
        "Closing is expected in Q2.",
        "Party",
        "Role",
        "Acme",
        "Buyer",
        "Signed by Acme.",
    ]


def test_create_then_append(world: World) -> None:
    assert run(world, "create_document", path="out/summary.docx", title="Summary", paragraphs=["One.", "Two."]) == (
        "created out/summary.docx (2 paragraphs)"
    )
    assert run(world, "append_paragraph", path="out/summary.docx", text="Three.") == (
        "appended paragraph to out/summary.docx (now 4 paragraphs)"  # the title is a paragraph too
    )
    assert document_text(world.path("out/summary.docx")) == "Summary\nOne.\nTwo.\nThree."


def test_replace_text_in_body_runs_and_table(world: World) -> None:
    assert run(world, "replace_text", path=MEMO, old="Acme", new="Apex") == (
        "replaced 2 occurrence(s) of 'Acme' in docs/memo.docx"  # the table cell and the last paragraph
    )
    # "is expected in" straddles three runs (plain, bold, plain).
    assert run(world, "replace_text", path=MEMO, old="is expected in", new="slips to") == (
        "replaced 1 occurrence(s) of 'is expected in' in docs/memo.docx"
    )
    text = document_text(world.path(MEMO))
    assert "Apex" in text and "Acme" not in text and "Closing slips to Q2." in text


def test_replace_text_when_new_contains_old(world: World) -> None:
    run(world, "replace_text", path=MEMO, old="Acme", new="Acme Corp")
    assert document_text(world.path(MEMO)).count("Acme Corp") == 2


def test_replace_text_not_found(world: World) -> None:
    with pytest.raises(ToolError, match=r"'acme' does not occur"):
        run(world, "replace_text", path=MEMO, old="acme", new="x")
    with pytest.raises(ToolError, match=r"argument 'old'"):
        run(world, "replace_text", path=MEMO, old="", new="x")


def test_errors(world: World) -> None:
    with pytest.raises(ToolError, match=r"no file 'docs/memo2.docx'.*memo.docx"):
        run(world, "read_document", path="docs/memo2.docx")
    with pytest.raises(ToolError, match=r"not a .docx file.*pdf.read_pdf"):
        run(world, "read_document", path="reports/report.pdf")
    with pytest.raises(ToolError, match=r"must end in .docx"):
        run(world, "create_document", path="out/summary.txt", title="t", paragraphs=[])
    with pytest.raises(ToolError, match=r"argument 'paragraphs'"):
        run(world, "create_document", path="out/s.docx", title="t", paragraphs="just a string")
    (world.fs_root / "docs" / "broken.docx").write_bytes(b"PK\x03\x04 nonsense")
    with pytest.raises(ToolError, match=r"cannot open broken.docx as a Word document"):
        run(world, "read_document", path="docs/broken.docx")


@pytest.mark.parametrize("op", ["read_document", "append_paragraph", "create_document"])
def test_paths_cannot_leave_the_world(world: World, escaping_path: Callable[[str], str], op: str) -> None:
    extra = {
        "read_document": {},
        "append_paragraph": {"text": "x"},
        "create_document": {"title": "t", "paragraphs": []},
    }
    with pytest.raises(ToolError, match=r"absolute paths are not allowed|path leaves the world root"):
        run(world, op, path=escaping_path(".docx"), **extra[op])
