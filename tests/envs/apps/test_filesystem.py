"""filesystem: list, read, write, search; binary formats refused; paths confined to the world."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from envs.apps import ToolError, World, call_tool


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"filesystem.{op}", args)


def test_list_files_recursive_and_flat(world: World) -> None:
    listing = run(world, "list_files").splitlines()
    assert "notes/" in listing and "notes/readme.md" in listing and "models/model.xlsx" in listing
    assert run(world, "list_files", path="notes", recursive=False).splitlines() == ["notes/data.csv", "notes/readme.md"]


def test_list_files_empty_and_missing_folder(world: World) -> None:
    (world.fs_root / "empty").mkdir()
    assert "empty" in run(world, "list_files", path="empty")
    with pytest.raises(ToolError, match=r"no folder 'nope'"):
        run(world, "list_files", path="nope")
    with pytest.raises(ToolError, match=r"is a file"):
        run(world, "list_files", path="notes/readme.md")


def test_read_file_text_and_truncation(world: World) -> None:
    assert run(world, "read_file", path="notes/data.csv") == "company,revenue\nAcme,412.5\nBeta,99\n"
    cut = run(world, "read_file", path="notes/readme.md", max_chars=7)
    assert cut == "Project\n[truncated: showing 7 of 51 characters]"  # 15 + 23 + 13 characters


@pytest.mark.parametrize(
    ("path", "tool"),
    [
        ("models/model.xlsx", "sheets.read_sheet"),
        ("docs/memo.docx", "docs.read_document"),
        ("reports/report.pdf", "pdf.read_pdf"),
        ("decks/deck.pptx", "slides.read_deck"),
    ],
)
def test_read_file_points_binary_formats_to_their_app(world: World, path: str, tool: str) -> None:
    with pytest.raises(ToolError, match=tool):
        run(world, "read_file", path=path)


def test_read_file_errors(world: World) -> None:
    (world.fs_root / "blob.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(ToolError, match=r"binary file"):
        run(world, "read_file", path="blob.bin")
    with pytest.raises(ToolError, match=r"no file 'notes/missing.txt'"):
        run(world, "read_file", path="notes/missing.txt")
    with pytest.raises(ToolError, match=r"max_chars"):
        run(world, "read_file", path="notes/readme.md", max_chars=0)


def test_write_file_creates_parents_and_overwrites(world: World) -> None:
    assert run(world, "write_file", path="out/new/summary.md", content="héllo") == "wrote 6 bytes to out/new/summary.md"
    assert (world.fs_root / "out/new/summary.md").read_text() == "héllo"
    run(world, "write_file", path="out/new/summary.md", content="bye")
    assert (world.fs_root / "out/new/summary.md").read_text() == "bye"
    with pytest.raises(ToolError, match=r"sheets tools"):
        run(world, "write_file", path="models/model.xlsx", content="oops")


def test_search_files(world: World) -> None:
    hits = run(world, "search_files", query="ACME").splitlines()
    assert hits == ["notes/data.csv:2: Acme,412.5"]
    assert run(world, "search_files", query="q2", path="notes") == "notes/readme.md:2: The deal closes in Q2."
    assert "no matches" in run(world, "search_files", query="zebra")
    with pytest.raises(ToolError, match=r"query"):
        run(world, "search_files", query="")


def test_search_skips_symlinks_that_leave_the_world(world: World) -> None:
    # escape.txt points at a copy of readme.md outside the world: only the real readme may match.
    assert run(world, "search_files", query="Project Falcon") == "notes/readme.md:1: Project Falcon"


@pytest.mark.parametrize("op", ["read_file", "write_file", "list_files", "search_files"])
def test_paths_cannot_leave_the_world(world: World, escaping_path: Callable[[str], str], op: str) -> None:
    args = {"path": escaping_path(".txt")} | ({"content": "x"} if op == "write_file" else {})
    args |= {"query": "x"} if op == "search_files" else {}
    with pytest.raises(ToolError, match=r"absolute paths are not allowed|path leaves the world root"):
        run(world, op, **args)
