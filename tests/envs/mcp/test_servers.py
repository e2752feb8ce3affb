"""Every tool through the gateway over the in-memory transport: listing, happy path, bad input, escapes, crashes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mcp
import pytest
from mcp.types import CallToolResult

from envs.apps import TOOLS, ToolError, World, call_tool
from envs.mcp import servers
from envs.mcp.servers import APP_NAMES, build_app_server, build_gateway, mcp_name, registry_name

pytestmark = pytest.mark.anyio

# (tool, arguments, then for a write: (tool, arguments, text the read must show afterwards))
HAPPY: list[tuple[str, dict[str, Any], tuple[str, dict[str, Any], str] | None]] = [
    ("filesystem.list_files", {"path": "reference"}, None),
    ("filesystem.read_file", {"path": "reference/fx_eur_usd.txt"}, None),
    (
        "filesystem.write_file",
        {"path": "out/n.txt", "content": "hi"},
        ("filesystem.read_file", {"path": "out/n.txt"}, "hi"),
    ),
    ("filesystem.search_files", {"query": "1.0821"}, None),
    ("docs.read_document", {"path": "docs/ic_memo.docx"}, None),
    (
        "docs.create_document",
        {"path": "out/memo.docx", "title": "Memo", "paragraphs": ["First point."]},
        ("docs.read_document", {"path": "out/memo.docx"}, "First point."),
    ),
    (
        "docs.append_paragraph",
        {"path": "docs/ic_memo.docx", "text": "Appended line."},
        ("docs.read_document", {"path": "docs/ic_memo.docx"}, "Appended line."),
    ),
    (
        "docs.replace_text",
        {"path": "docs/ic_memo.docx", "old": "Project Orion", "new": "Project Vega"},
        ("docs.read_document", {"path": "docs/ic_memo.docx"}, "Project Vega"),
    ),
    ("sheets.list_sheets", {"path": "models/comps.xlsx"}, None),
    ("sheets.read_sheet", {"path": "models/comps.xlsx", "sheet": "Comps", "cell_range": "A1:C3"}, None),
    ("sheets.read_cell", {"path": "models/comps.xlsx", "sheet": "Comps", "cell": "A1"}, None),
    ("sheets.read_formula", {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "C5"}, None),
    (
        "sheets.write_cell",
        {"path": "models/comps.xlsx", "sheet": "Comps", "cell": "H1", "value": 7},
        ("sheets.read_cell", {"path": "models/comps.xlsx", "sheet": "Comps", "cell": "H1"}, "7"),
    ),
    ("pdf.read_pdf", {"path": "reports/target_overview.pdf", "pages": "1"}, None),
    ("pdf.read_tables", {"path": "reports/target_overview.pdf", "page": 3}, None),
    ("slides.read_deck", {"path": "presentations/board_update.pptx"}, None),
    (
        "slides.add_slide",
        {"path": "presentations/board_update.pptx", "title": "Risks", "bullets": ["FX exposure"]},
        ("slides.read_deck", {"path": "presentations/board_update.pptx"}, "Slide 5: Risks\nFX exposure"),
    ),
    ("mail.list_messages", {}, None),
    ("mail.read_message", {"message_id": "m001"}, None),
    ("mail.search_messages", {"query": "comps"}, None),
    (
        "mail.save_attachment",
        {"message_id": "m001", "filename": "operating_model.xlsx", "dest_path": "inbox/om.xlsx"},
        ("filesystem.list_files", {"path": "inbox"}, "om.xlsx"),
    ),
    (
        "mail.send_message",
        {"to": ["a@b.com"], "subject": "Update", "body": "Done."},
        ("mail.list_messages", {"folder": "sent"}, "Update"),
    ),
    ("chat.list_channels", {}, None),
    ("chat.read_channel", {"channel": "deal-team", "limit": 2}, None),
    ("chat.search_messages", {"query": "model"}, None),
    (
        "chat.post_message",
        {"channel": "general", "text": "Posted over MCP"},
        ("chat.read_channel", {"channel": "general"}, "Posted over MCP"),
    ),
    ("calendar.list_events", {"start_date": "2026-03-11", "end_date": "2026-03-12"}, None),
    ("calendar.read_event", {"event_id": "e003"}, None),
    ("calendar.search_events", {"query": "committee"}, None),
    (
        "calendar.create_event",
        {"title": "Bid prep", "start": "2026-03-20T09:00:00", "end": "2026-03-20T10:00:00"},
        ("calendar.search_events", {"query": "bid prep"}, "Bid prep"),
    ),
    ("code_exec.run_python", {"code": "import openpyxl; print(6 * 7)"}, None),
    ("code_exec.run_bash", {"command": "cat reference/fx_eur_usd.txt"}, None),
]

# One fixable mistake per app: the error result must say what was wrong.
BAD: list[tuple[str, dict[str, Any], str]] = [
    ("filesystem.read_file", {"path": "models/comps.xlsx"}, "sheets.read_sheet"),
    ("docs.read_document", {"path": "docs/nope.docx"}, "ic_memo.docx"),
    ("sheets.read_cell", {"path": "models/comps.xlsx", "sheet": "Comp", "cell": "A1"}, "sheets are: Comps"),
    ("pdf.read_pdf", {"path": "reports/target_overview.pdf", "pages": "99"}, "out of range"),
    ("slides.add_slide", {"path": "notes.txt", "title": "T", "bullets": []}, ".pptx"),
    ("mail.read_message", {"message_id": "m999"}, "m999"),
    ("chat.read_channel", {"channel": "nope"}, "deal-team"),
    ("calendar.list_events", {"start_date": "next week"}, "ISO format"),
    ("code_exec.run_python", {"code": "print(1)", "timeout_s": 0}, "timeout_s"),
]


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content)  # type: ignore[union-attr]


async def test_listing_has_every_tool_with_description_and_schema(world_dir: Path) -> None:
    async with mcp.Client(build_gateway(World(world_dir))) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {mcp_name(name) for name in TOOLS}
    assert {name.split(".")[0] for name in TOOLS} == set(APP_NAMES) and len(APP_NAMES) == 9
    for name, spec in TOOLS.items():
        tool = tools[mcp_name(name)]
        assert tool.description == spec.description and len(tool.description) > 40
        assert tool.input_schema["type"] == "object"
        assert set(tool.input_schema["properties"]) == set(spec.arguments.model_fields)
    read_cell = tools["sheets_read_cell"].input_schema
    assert read_cell["required"] == ["path", "sheet", "cell"] and read_cell["additionalProperties"] is False
    assert tools["sheets_read_cell"].annotations.read_only_hint is True
    assert tools["sheets_write_cell"].annotations.read_only_hint is False


@pytest.mark.parametrize(("name", "args", "check"), HAPPY, ids=[case[0] for case in HAPPY])
async def test_every_tool_matches_the_direct_call(
    name: str, args: dict[str, Any], check: tuple[str, dict[str, Any], str] | None, world_dir: Path, twin_dir: Path
) -> None:
    async with mcp.Client(build_gateway(World(world_dir))) as client:
        result = await client.call_tool(mcp_name(name), args)
        assert not result.is_error, _text(result)
        assert _text(result) == call_tool(World(twin_dir), name, args) != ""
        if check is not None:
            read, read_args, expected = check
            assert expected in _text(await client.call_tool(mcp_name(read), read_args))


def test_the_cases_cover_every_tool() -> None:
    assert {case[0] for case in HAPPY} == set(TOOLS)
    assert {case[0].split(".")[0] for case in BAD} == set(APP_NAMES)


@pytest.mark.parametrize("name", sorted(TOOLS))
async def test_unknown_argument_is_an_error_naming_tool_and_argument(name: str, world_dir: Path) -> None:
    async with mcp.Client(build_gateway(World(world_dir))) as client:
        result = await client.call_tool(mcp_name(name), {"bogus": 1})
    assert result.is_error
    assert f"{name}: " in _text(result) and "unknown argument 'bogus'" in _text(result)


@pytest.mark.parametrize(("name", "args", "hint"), BAD, ids=[case[0] for case in BAD])
async def test_bad_input_gives_an_actionable_error(name: str, args: dict[str, Any], hint: str, world_dir: Path) -> None:
    async with mcp.Client(build_gateway(World(world_dir))) as client:
        result = await client.call_tool(mcp_name(name), args)
    assert result.is_error and hint in _text(result)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("filesystem.read_file", {"path": "../../../etc/passwd"}),
        ("filesystem.read_file", {"path": "/etc/passwd"}),
        ("filesystem.read_file", {"path": "escape.txt"}),
        ("filesystem.write_file", {"path": "../outside.txt", "content": "x"}),
        ("filesystem.list_files", {"path": "escape_dir"}),
        ("sheets.read_cell", {"path": "/etc/x.xlsx", "sheet": "S", "cell": "A1"}),
        ("mail.save_attachment", {"message_id": "m001", "filename": "operating_model.xlsx", "dest_path": "../x.xlsx"}),
    ],
    ids=["dotdot", "absolute", "symlink", "write-dotdot", "symlinked-dir", "sheets-absolute", "attachment-dotdot"],
)
async def test_path_escapes_are_refused(name: str, args: dict[str, Any], world_dir: Path) -> None:
    outside = world_dir.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (world_dir / "filesystem" / "escape.txt").symlink_to(outside / "secret.txt")
    (world_dir / "filesystem" / "escape_dir").symlink_to(outside)
    async with mcp.Client(build_gateway(World(world_dir))) as client:
        result = await client.call_tool(mcp_name(name), args)
    assert result.is_error and name in _text(result)
    assert "top secret" not in _text(result) and "root:x:0" not in _text(result)
    assert sorted(os.listdir(outside)) == ["secret.txt"] and not (world_dir / "outside.txt").exists()


async def test_unknown_tool_suggests_close_names(world_dir: Path) -> None:
    async with mcp.Client(build_gateway(World(world_dir), apps=["sheets"])) as client:
        typo = await client.call_tool("sheets_read_cel", {})
        other_app = await client.call_tool("pdf_read_pdf", {"path": "reports/target_overview.pdf"})
    assert typo.is_error and "did you mean sheets_read_cell" in _text(typo)
    assert other_app.is_error and "unknown tool 'pdf_read_pdf'" in _text(other_app)


async def test_a_crashing_tool_is_reported_with_its_type_and_the_server_keeps_serving(
    world_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(world: World, args: dict[str, Any]) -> str:
        raise KeyError("boom")

    original = servers.runner_for
    monkeypatch.setattr(
        servers, "runner_for", lambda name, v: crash if name == "chat.list_channels" else original(name, v)
    )
    async with mcp.Client(build_gateway(World(world_dir))) as client:
        crashed = await client.call_tool("chat_list_channels", {})
        after = await client.call_tool("filesystem_read_file", {"path": "reference/fx_eur_usd.txt"})
    assert crashed.is_error and _text(crashed) == "chat.list_channels failed unexpectedly: KeyError: 'boom'"
    assert not after.is_error and _text(after) == "1.0821\n"


async def test_per_app_server_uses_op_names(world_dir: Path) -> None:
    async with mcp.Client(build_app_server("sheets", World(world_dir))) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("read_cell", {"path": "models/comps.xlsx", "sheet": "Comps", "cell": "A1"})
    assert sorted(names) == ["list_sheets", "read_cell", "read_formula", "read_sheet", "write_cell"]
    assert _text(result) == "Company"


def test_names_map_both_ways() -> None:
    assert mcp_name("code_exec.run_python") == "code_exec_run_python"
    assert registry_name("code_exec_run_python") == "code_exec.run_python"
    assert all(registry_name(mcp_name(name)) == name for name in TOOLS)
    with pytest.raises(ToolError, match="did you mean sheets_read_cell"):
        registry_name("sheets_read_cel")
    with pytest.raises(ValueError, match="unknown or no apps"):
        build_app_server("excel", World(Path("/nonexistent")))
