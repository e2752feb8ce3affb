"""sheets: computed values (incl. cross-sheet refs), formulas, writes that recompute, bad input, path escapes."""

from __future__ import annotations

from collections.abc import Callable

import openpyxl
import pytest

from envs.apps import ToolError, World, call_tool
from envs.apps.sheets import computed_value, format_value

BOOK = "models/model.xlsx"


def run(world: World, op: str, **args: object) -> str:
    return call_tool(world, f"sheets.{op}", {"path": BOOK} | args)


def test_list_sheets(world: World) -> None:
    assert run(world, "list_sheets") == "Model (A1:B9)\nInputs (A1:B3)\nMy Sheet (A1:A1)"


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("B2", "412.5"),  # =Inputs!B2*Inputs!B3 = 2.5 * 165, a cross-sheet reference
        ("B4", "262.5"),  # =B2-B3 = 412.5 - 150
        ("B5", "262.5"),  # =MEDIAN(412.5, 150, 262.5), MEDIAN comes from our pycel plugin
        ("B6", "562.5"),  # =SUM(B2:B3)
        ("B7", "#DIV/0!"),
        ("B9", "14"),  # ='My Sheet'!A1*2, a quoted sheet name
        ("A2", "Revenue"),
        ("b3", "150"),
        ("$B$3", "150"),
        ("C40", "(empty)"),
    ],
)
def test_read_cell_computes_formulas(world: World, cell: str, expected: str) -> None:
    assert run(world, "read_cell", sheet="Model", cell=cell) == expected


def test_read_cell_reports_an_uncomputable_formula(world: World) -> None:
    with pytest.raises(ToolError, match=r"cannot compute Model!B8 \(=FOOBAR\(1\)\).*FOOBAR"):
        run(world, "read_cell", sheet="Model", cell="B8")


def test_read_formula(world: World) -> None:
    assert run(world, "read_formula", sheet="Model", cell="B2") == "=Inputs!B2*Inputs!B3"
    assert run(world, "read_formula", sheet="Model", cell="B3") == "150"


def test_read_sheet_whole_and_range(world: World) -> None:
    whole = run(world, "read_sheet", sheet="Inputs")
    assert whole == "A1=Driver | B1=Value\nA2=Price | B2=2.5\nA3=Volume | B3=165"
    part = run(world, "read_sheet", sheet="Model", cell_range="B2:B8")
    lines = part.splitlines()
    assert lines[:3] == ["B2=412.5", "B3=150", "B4=262.5"]
    assert lines[6].startswith("B8=#ERROR(") and "FOOBAR" in lines[6]
    assert "no values" in run(world, "read_sheet", sheet="Model", cell_range="D1:E5")


def test_write_constant_recomputes_dependents(world: World) -> None:
    assert run(world, "write_cell", sheet="Inputs", cell="B3", value=200) == "Inputs!B3 = 200"
    assert run(world, "read_cell", sheet="Model", cell="B2") == "500"  # 2.5 * 200
    assert run(world, "read_cell", sheet="Model", cell="B4") == "350"  # 500 - 150
    assert computed_value(world.path(BOOK), "Model", "B6") == 650  # 500 + 150


def test_write_formula_and_numeric_text(world: World) -> None:
    shown = run(world, "write_cell", sheet="Model", cell="B10", value="=B4/B2")
    assert shown == "Model!B10 = =B4/B2 (computed: 0.6363636364)"  # 262.5 / 412.5
    run(world, "write_cell", sheet="Model", cell="B3", value="100.5")
    assert run(world, "read_cell", sheet="Model", cell="B4") == "312"  # 412.5 - 100.5
    assert openpyxl.load_workbook(world.path(BOOK))["Model"]["B2"].value == "=Inputs!B2*Inputs!B3"  # formulas kept


def test_write_over_a_formula_says_so(world: World) -> None:
    shown = run(world, "write_cell", sheet="Model", cell="B4", value="n/a")
    assert shown == "Model!B4 = n/a (replaced the formula =B2-B3)"


def test_computed_value_for_graders(world: World) -> None:
    file = world.path(BOOK)
    assert computed_value(file, "Model", "B2") == pytest.approx(412.5)
    assert computed_value(file, "Model", "A2") == "Revenue"
    assert computed_value(file, "Model", "C9") is None


def test_format_value() -> None:
    assert format_value(0.1 + 0.2) == "0.3"
    assert format_value(412.0) == "412"
    assert format_value(2 / 3) == "0.6666666667"
    assert format_value(True) == "TRUE"
    assert format_value(1e20) == "1e+20"


def test_wrong_sheet_lists_the_sheets(world: World) -> None:
    with pytest.raises(ToolError, match=r"no sheet 'Modle' in model.xlsx; sheets are: Model, Inputs, My Sheet"):
        run(world, "read_cell", sheet="Modle", cell="B2")
    assert run(world, "read_cell", sheet="model", cell="B2") == "412.5"  # unique case-insensitive match


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        ("B", "bad cell reference"),
        ("2B", "bad cell reference"),
        ("Model!B2", "pass the sheet name"),
        ("XFE1", "outside the sheet"),
        ("A0", "outside the sheet"),
    ],
)
def test_bad_cell_refs(world: World, cell: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        run(world, "read_cell", sheet="Model", cell=cell)


def test_bad_range(world: World) -> None:
    with pytest.raises(ToolError, match=r"bad range"):
        run(world, "read_sheet", sheet="Model", cell_range="A1:B2:C3")


def test_missing_file_wrong_extension_and_corrupt_file(world: World) -> None:
    with pytest.raises(ToolError, match=r"no file 'models/modle.xlsx'.*model.xlsx"):
        call_tool(world, "sheets.list_sheets", {"path": "models/modle.xlsx"})
    with pytest.raises(ToolError, match=r"not a \.xlsx file.*filesystem.read_file"):
        call_tool(world, "sheets.list_sheets", {"path": "notes/data.csv"})
    (world.fs_root / "models" / "broken.xlsx").write_text("not a zip")
    with pytest.raises(ToolError, match=r"cannot open broken.xlsx as an Excel workbook"):
        call_tool(world, "sheets.list_sheets", {"path": "models/broken.xlsx"})


def test_write_value_must_be_text_or_number(world: World) -> None:
    with pytest.raises(ToolError, match=r"argument 'value'"):
        run(world, "write_cell", sheet="Model", cell="B3", value=[1, 2])


def test_paths_cannot_leave_the_world(world: World, escaping_path: Callable[[str], str]) -> None:
    with pytest.raises(ToolError, match=r"absolute paths are not allowed|path leaves the world root"):
        call_tool(world, "sheets.read_cell", {"path": escaping_path(".xlsx"), "sheet": "Model", "cell": "A1"})
