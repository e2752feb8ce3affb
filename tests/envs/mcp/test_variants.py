"""Each known-bad variant shows the symptom the de-risk stage looks for, and breaks only the tools it names."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envs.mcp import variants
from envs.mcp.client import GatewayClient, Transport
from envs.mcp.variants import VARIANTS, BadVariant

pytestmark = pytest.mark.anyio

DECK = "presentations/board_update.pptx"
PDF = "reports/target_overview.pdf"


def test_every_variant_is_registered() -> None:
    assert set(VARIANTS) == set(BadVariant)
    assert VARIANTS[BadVariant.SLIDES_RETURNS_NONE].tools == {"slides.add_slide"}


async def test_slides_returns_none_hides_a_successful_write(world_dir: Path) -> None:
    variant = frozenset({BadVariant.SLIDES_RETURNS_NONE})
    async with GatewayClient(Transport.INMEMORY, world=world_dir, variants=variant) as client:
        added = await client.call("slides.add_slide", {"path": DECK, "title": "Risks", "bullets": ["FX"]})
        deck = await client.call("slides.read_deck", {"path": DECK})
    assert added.text == "" and added.returned_empty and not added.is_error
    assert "Slide 5: Risks\nFX" in deck.text and not deck.returned_empty  # the write happened; reads are intact


async def test_correct_slides_write_is_not_empty(world_dir: Path) -> None:
    async with GatewayClient(Transport.INMEMORY, world=world_dir) as client:
        added = await client.call("slides.add_slide", {"path": DECK, "title": "Risks", "bullets": []})
    assert added.text == f"added slide 5 to {DECK}" and not added.returned_empty


async def test_pdf_flatten_interleaves_the_columns(world_dir: Path) -> None:
    async with GatewayClient(Transport.INMEMORY, world=world_dir) as client:
        aware = (await client.call("pdf.read_pdf", {"path": PDF, "pages": "2"})).text
    variant = frozenset({BadVariant.PDF_FLATTEN})
    async with GatewayClient(Transport.INMEMORY, world=world_dir, variants=variant) as client:
        flat = (await client.call("pdf.read_pdf", {"path": PDF, "pages": "2"})).text
        bad_pages = await client.call("pdf.read_pdf", {"path": PDF, "pages": "99"})
    aware_lines = aware.splitlines()
    assert aware_lines[0] == flat.splitlines()[0] == "--- page 2 ---"
    # Layout-aware: the left column's lines, then the right column's; flattened: one left and one right line per row.
    glued = {f"{left} {right}" for left in aware_lines for right in aware_lines if left != right}
    mixed = [line for line in flat.splitlines() if line in glued]
    assert len(mixed) >= 3, flat
    assert not any(line in glued for line in aware_lines)
    assert bad_pages.is_error and "out of range" in bad_pages.text  # the correct tool's checks still apply


async def test_code_exec_no_packages_cannot_import_openpyxl(world_dir: Path) -> None:
    variant = frozenset({BadVariant.CODE_EXEC_NO_PACKAGES})
    async with GatewayClient(Transport.INMEMORY, world=world_dir, variants=variant) as client:
        broken = await client.call("code_exec.run_python", {"code": "import openpyxl"})
        stdlib = await client.call("code_exec.run_python", {"code": "import json; print(json.dumps([6 * 7]))"})
        bash = await client.call("code_exec.run_bash", {"command": "python -c 'import openpyxl; print(1)'"})
    assert broken.is_error and broken.text.startswith("exit_code: 1\n")
    assert "ModuleNotFoundError: No module named 'openpyxl'" in broken.text
    assert not stdlib.is_error and not bash.is_error
    assert stdlib.text.startswith("exit_code: 0\nstdout:\n[42]\n")
    assert bash.text.startswith("exit_code: 0\nstdout:\n1\n")  # the variant breaks run_python only


async def test_slow_cell_read_answers_right_but_only_after_its_delay(world_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(variants, "SLOW_TOOL_S", 0.5)
    cell = {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"}
    async with GatewayClient(Transport.INMEMORY, world=world_dir) as client:
        right = await client.call("sheets.read_cell", cell)
    variant = frozenset({BadVariant.SLOW_CELL_READ})
    async with GatewayClient(Transport.INMEMORY, world=world_dir, variants=variant) as client:
        started = time.perf_counter()
        slow = await client.call("sheets.read_cell", cell)
        took = time.perf_counter() - started
        started = time.perf_counter()
        await client.call("sheets.list_sheets", {"path": cell["path"]})
        other = time.perf_counter() - started
    assert slow.text == right.text and not slow.is_error
    assert took >= 0.5 and other < 0.5  # only read_cell is slow
