"""Special files and office bombs that model code can leave in its world: a FIFO never hangs a file tool or the
grader, and a small office file never balloons the memory of the process that opens it (each is refused with a clear
error instead)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docx
import openpyxl
import pytest

import envs
from envs.apps import ToolError, World, call_tool
from envs.apps.code_exec import run_limited
from envs.graders import diff_worlds, grade
from envs.sandbox.limits import Isolation, ResourceLimits
from envs.types import FileExists, TaskSpec

HANG_S = 5.0


def _world(root: Path) -> World:
    (root / "filesystem").mkdir(parents=True)
    (root / "apps_data").mkdir()
    (root / "filesystem" / "notes.txt").write_text("alpha\n")
    return World(root)


def _within(seconds: float, work: Callable[[], Any]) -> Any:
    """``work()`` in a daemon thread; fails the test (instead of hanging it) when it takes longer than ``seconds``."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds:g} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture
def fifo_world(tmp_path: Path):
    world = _world(tmp_path / "after")
    fifos = [world.fs_root / "pipe.txt", world.fs_root / "model.xlsx", world.fs_root / "memo.docx"]
    for fifo in fifos:
        os.mkfifo(fifo)
    try:
        yield world
    finally:  # a reader the old code left blocked gets its end of file, so the test process can exit
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("filesystem.read_file", {"path": "pipe.txt"}),
        ("sheets.read_sheet", {"path": "model.xlsx", "sheet": "Model"}),
        ("docs.read_document", {"path": "memo.docx"}),
    ],
)
def test_a_fifo_is_refused_by_the_file_tools_instead_of_hanging_them(fifo_world: World, tool: str, args: dict) -> None:
    def call() -> str:
        with pytest.raises(ToolError, match="regular file") as refused:
            call_tool(fifo_world, tool, args)
        return str(refused.value)

    message = _within(HANG_S, call)
    assert "FIFO" in message or "not a regular file" in message


def test_grading_a_world_with_a_fifo_finishes(fifo_world: World, tmp_path: Path) -> None:
    before = _world(tmp_path / "before").root
    task = TaskSpec(
        task_id="t",
        domain="general",
        world_id="w",
        prompt="Write pipe.txt",
        rubric=[FileExists(path="pipe.txt"), FileExists(path="notes.txt")],
    )
    diff = _within(HANG_S, lambda: diff_worlds(before, fifo_world.root))
    assert diff.added == ("filesystem/memo.docx", "filesystem/model.xlsx", "filesystem/pipe.txt")
    result = _within(HANG_S, lambda: grade(task, "done", before, fifo_world.root))
    assert [criterion.passed for criterion in result.criteria] == [False, True]


def _zip_bytes(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _with_sheet_xml(path: Path, inside_sheet_data: str = "", after_sheet_data: str = "") -> None:
    """A valid one-cell workbook whose sheet gets XML spliced in by hand (what model code can write)."""
    book = openpyxl.Workbook()
    book.active.title = "Model"
    book.active["A1"] = 1
    book.save(path)
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    sheet = members["xl/worksheets/sheet1.xml"].decode()
    sheet = sheet.replace("</sheetData>", f"{inside_sheet_data}</sheetData>{after_sheet_data}", 1)
    members["xl/worksheets/sheet1.xml"] = sheet.encode()
    path.write_bytes(_zip_bytes(members))


def test_a_docx_zip_bomb_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    world = _world(tmp_path / "w")
    template = io.BytesIO()
    docx.Document().save(template)
    with zipfile.ZipFile(template) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    body = members["word/document.xml"].decode()
    padding = " " * (40 * 1024 * 1024)  # 40 MiB of XML that deflates to a few KiB
    members["word/document.xml"] = body.replace("<w:body>", f"<w:body>{padding}", 1).encode()
    bomb = _zip_bytes(members)
    assert len(bomb) < 1024 * 1024
    (world.fs_root / "memo.docx").write_bytes(bomb)
    with pytest.raises(ToolError, match=r"memo.docx unpacks to 40\.\d MiB"):
        call_tool(world, "docs.read_document", {"path": "memo.docx"})


BOMBS = """
import json, sys
from pathlib import Path
from envs.apps import World, call_tool
world = World(Path(sys.argv[1]))
calls = [
    ("sheets.list_sheets", {"path": "merged.xlsx"}),
    ("sheets.read_sheet", {"path": "far.xlsx", "sheet": "Model"}),
    ("sheets.write_cell", {"path": "small.xlsx", "sheet": "Model", "cell": "B1", "value": "=SUM(A2:A900000)"}),
]
for tool, args in calls:
    try:
        print(json.dumps(["ok", call_tool(world, tool, args)[:300]]))
    except BaseException as error:
        print(json.dumps([type(error).__name__, str(error)[:300]]))
"""


def test_small_workbooks_cannot_balloon_the_memory_of_whoever_opens_them(tmp_path: Path) -> None:
    """Run where memory is capped (1.5 GiB): before the limits each of these ran out of it (or time)."""
    world = _world(tmp_path / "w")
    merged = '<mergeCells count="1"><mergeCell ref="A1:XFD1048576"/></mergeCells>'
    _with_sheet_xml(world.fs_root / "merged.xlsx", after_sheet_data=merged)
    far = '<row r="1048576"><c r="XFD1048576"><v>2</v></c></row>'
    _with_sheet_xml(world.fs_root / "far.xlsx", inside_sheet_data=far)
    _with_sheet_xml(world.fs_root / "small.xlsx")
    for name in ("merged.xlsx", "far.xlsx", "small.xlsx"):
        assert (world.fs_root / name).stat().st_size < 10_000

    limits = ResourceLimits(memory_mb=1536, isolation=Isolation.NONE)
    here = {"PYTHONPATH": str(Path(envs.__file__).parents[1])}  # the code under test, wherever it is checked out
    result = run_limited([sys.executable, "-c", BOMBS, str(world.root)], world.fs_root, 60, here, limits)
    assert not result.timed_out and result.exit_code == 0, result.stderr[-2000:]
    merged, far, formula = (json.loads(line) for line in result.stdout.splitlines())
    assert merged[0] == "ToolError" and "merges or links ranges of over" in merged[1]
    assert far[0] == "ToolError" and "spans 1048576 rows by 16384 columns" in far[1]
    assert formula[0] == "ok" and "covers 899999 cells in A2:A900000" in formula[1]
