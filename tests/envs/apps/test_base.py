"""The registry and shared helpers: argument validation, error conversion, schemas, atomic writes, ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.apps import TOOLS, ToolError, World, call_tool, tool_schema
from envs.apps.base import matches, next_id, parse_timestamp
from envs.apps.office_files import cell_position, column_index, range_cells
from envs.files import atomic_write_json, atomic_write_text

CATALOGUE = {
    "filesystem": {"list_files", "read_file", "write_file", "search_files"},
    "docs": {"read_document", "create_document", "append_paragraph", "replace_text"},
    "sheets": {"list_sheets", "read_sheet", "read_cell", "read_formula", "write_cell"},
    "pdf": {"read_pdf", "read_tables"},
    "slides": {"read_deck", "add_slide"},
    "mail": {"list_messages", "read_message", "search_messages", "save_attachment", "send_message"},
    "chat": {"list_channels", "read_channel", "search_messages", "post_message"},
    "calendar": {"list_events", "read_event", "search_events", "create_event"},
    "code_exec": {"run_python", "run_bash"},
}


def test_registry_holds_exactly_the_catalogue() -> None:
    assert set(TOOLS) == {f"{app}.{op}" for app, ops in CATALOGUE.items() for op in ops}
    for name, spec in TOOLS.items():
        assert spec.app == name.split(".")[0]
        assert len(spec.description) > 40, name
        assert "world" not in tool_schema(name).get("properties", {}), name


def test_tool_schema_lists_arguments_with_types_and_defaults() -> None:
    schema = tool_schema("sheets.read_cell")
    assert schema["required"] == ["path", "sheet", "cell"]
    assert schema["properties"]["cell"]["type"] == "string"
    assert schema["additionalProperties"] is False
    send = tool_schema("mail.send_message")
    assert send["properties"]["attachments"]["default"] == []
    assert send["properties"]["to"]["type"] == "array"


def test_world_paths(world: World) -> None:
    assert world.fs_root == world.root / "filesystem"
    assert world.apps_root == world.root / "apps_data"
    assert world.path("models/model.xlsx") == (world.root / "filesystem/models/model.xlsx").resolve()
    assert world.rel(world.path("models/../models/model.xlsx")) == "models/model.xlsx"


def test_unknown_tool_suggests_the_close_name(world: World) -> None:
    with pytest.raises(ToolError, match=r"unknown tool 'sheets.read_cel'.*sheets.read_cell"):
        call_tool(world, "sheets.read_cel", {})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"path": "models/model.xlsx", "sheet": "Model"}, "missing argument 'cell'"),
        ({"path": "models/model.xlsx", "sheet": "Model", "cell": "B2", "colour": "red"}, "unknown argument 'colour'"),
        ({"path": "models/model.xlsx", "sheet": "Model", "cell": 5}, "argument 'cell'"),
        ({"path": ["models/model.xlsx"], "sheet": "Model", "cell": "B2"}, "argument 'path'"),
    ],
)
def test_bad_arguments_name_the_tool_and_argument(world: World, args: dict, message: str) -> None:
    with pytest.raises(ToolError, match=rf"^sheets.read_cell: .*{message}"):
        call_tool(world, "sheets.read_cell", args)


def test_arguments_must_be_an_object(world: World) -> None:
    with pytest.raises(ToolError, match=r"arguments must be a JSON object"):
        call_tool(world, "filesystem.list_files", ["."])  # type: ignore[arg-type]


def test_lax_numbers_and_defaults_are_applied(world: World) -> None:
    # "30" is accepted for a number (models often quote numbers); the default recursive=True applies.
    assert "notes/readme.md" in call_tool(world, "filesystem.list_files", {})
    assert "exit_code: 0" in call_tool(world, "code_exec.run_python", {"code": "print(1)", "timeout_s": "30"})


def test_os_errors_become_tool_errors_without_host_paths(world: World) -> None:
    with pytest.raises(ToolError) as caught:
        call_tool(world, "filesystem.write_file", {"path": "notes/readme.md/inner.txt", "content": "x"})
    assert str(world.root) not in str(caught.value)
    assert caught.value.args[0].startswith("filesystem.write_file: ")


def test_path_escape_becomes_tool_error(world: World) -> None:
    with pytest.raises(ToolError, match=r"path leaves the world root"):
        call_tool(world, "filesystem.read_file", {"path": "../apps_data/mail/mailbox.json"})


def test_atomic_writes_replace_and_leave_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "out.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert [p.name for p in target.parent.iterdir()] == ["out.json"]


def test_next_id_keeps_padding_and_counts_up() -> None:
    assert next_id("m", ["m001", "m007", "x999"]) == "m008"
    assert next_id("t", ["t09", "t01"]) == "t10"
    assert next_id("e", []) == "e001"


def test_matches_needs_every_term() -> None:
    assert matches("term SHEET", "Term sheet", "body")
    assert not matches("term invoice", "Term sheet")
    with pytest.raises(ToolError, match=r"empty"):
        matches("   ", "x")


def test_parse_timestamp() -> None:
    assert parse_timestamp("2026-03-04", "start").isoformat() == "2026-03-04T00:00:00"
    assert parse_timestamp("2026-03-04T10:00:00+02:00", "start").isoformat() == "2026-03-04T10:00:00"
    with pytest.raises(ToolError, match=r"bad start '04/03/2026'"):
        parse_timestamp("04/03/2026", "start")


def test_cell_positions_count_columns_in_base_26_without_zero() -> None:
    assert [column_index(letters) for letters in ("A", "Z", "AA", "AZ", "XFD")] == [1, 26, 27, 52, 16384]
    assert cell_position("$AB$12") == (12, 28) and cell_position("C") is None
    assert range_cells("A1:C5") == 15 and range_cells("Revenue") == 0
