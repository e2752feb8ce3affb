"""Fuzzing every tool behind the MCP gateway with the arguments a hostile or confused model sends: arbitrary JSON for
any argument, near-miss paths (``..``, absolute, symlinks out of the world, NUL, over-long names), out-of-range cells,
pages, limits and dates, unknown and missing arguments. Each call goes through the tool's runner, as the gateway's
``run_tool`` calls it (with and without the known-bad variants), on a copy of world ib-1.

The contract: a text result, or a ``ToolError`` (or the ``PathEscapeError`` ``run_tool`` also reports to the model) —
never any other exception, which the gateway would log as a crash — and nothing written outside the world folder.
``code_exec`` runs programs by design, so its code and command come from a fixed harmless set; its other arguments are
fuzzed like every other tool's."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from envs.apps import TOOLS, ToolError, World
from envs.mcp.variants import BadVariant, runner_for
from envs.paths import PathEscapeError
from envs.worlds import generate_world

# One example runs a tool on office files (tens of milliseconds): a tenth of the profile's examples per tool.
PER_TOOL = settings(max_examples=max(5, settings().max_examples // 10))
SECRET = "outside the world"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """World ib-1 with, beside it, an ``outside`` folder, and inside its filesystem symlinks that point there."""
    base = tmp_path_factory.mktemp("fuzz-tools-template")
    generate_world("ib-1", base / "world")
    outside = base / "outside"
    outside.mkdir()
    fs = base / "world" / "filesystem"
    for suffix in (".txt", ".xlsx", ".docx", ".pdf", ".pptx", ""):
        (outside / f"secret{suffix}").write_text(SECRET)
        (fs / f"escape{suffix}").symlink_to(outside / f"secret{suffix}")
    (fs / "escape_dir").symlink_to(outside, target_is_directory=True)
    return base


def _files(root: Path) -> list[str]:
    return sorted(path.relative_to(root).as_posix() for path in root.rglob("*"))


@pytest.fixture(scope="module")
def world_paths(template: Path) -> list[str]:
    """Every path in the template's filesystem, as the model names them."""
    return _files(template / "world" / "filesystem")


@pytest.fixture
def base(template: Path, tmp_path: Path) -> Path:
    """A fresh copy of the template per test; examples of one test share it, so writes pile up as in an episode."""
    return Path(shutil.copytree(template, tmp_path / "base", symlinks=True))


def _outside_state(base: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of everything next to the world folder, and of the world's parent itself."""
    state = {".": (0, base.stat().st_mtime_ns)}
    for path in base.rglob("*"):
        if not path.is_relative_to(base / "world"):
            info = path.lstat()
            state[path.relative_to(base).as_posix()] = (info.st_size, info.st_mtime_ns)
    return state


# --- argument strategies ---------------------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**80), max_value=10**80),
    st.floats(),
    st.text(),
    st.text(st.characters(codec="ascii"), max_size=10),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(), children, max_size=3)),
    max_leaves=8,
)
NEAR_MISS_PATHS = st.sampled_from(
    [
        "",
        ".",
        "..",
        "../",
        "./",
        "/",
        "//",
        "~",
        "~/x.txt",
        "/etc/passwd",
        "/tmp/fuzz-out.txt",
        "../outside/secret.txt",
        "../../outside/secret.txt",
        "reference/../../outside/secret.txt",
        "reference/../reference/fx_eur_usd.txt",
        "reference/fx_eur_usd.txt/x",
        "reference/fx_eur_usd.txt/",
        "escape_dir/secret.txt",
        "escape_dir/new.txt",
        "escape_dir/",
        "out/new.txt",
        "out/new.xlsx",
        "out/new.docx",
        "out/new.pptx",
        "out/new.pdf",
        "out/",
        "a\x00b.txt",
        "x" * 300 + ".txt",
        "/".join(["d"] * 2000) + ".txt",
        "reference\\fx_eur_usd.txt",
        "REFERENCE/FX_EUR_USD.TXT",
        "models/comps.XLSX",
        "models",
        "docs/ic_memo.docx\udcff",
        "nul\u2028line.txt",
        " reference/fx_eur_usd.txt",
    ]
)
CELLS = st.one_of(
    st.sampled_from(["A1", "C5", "c5", "$C$5", "A0", "0A", "XFD1048576", "XFE1", "A1048577", "A1:B2", "Comps!A1"]),
    st.builds(lambda column, row: f"{column}{row}", st.text("ABCXYZ$", min_size=1, max_size=4), st.integers()),
)
RANGES = st.one_of(
    st.sampled_from(["A1:C3", "A1:XFD1048576", "A:A", "1:1", "C3:A1", "A1", "A1:", ":", "A1:B2:C3", "Z0:Z1"]),
    st.builds(lambda a, b: f"{a}:{b}", CELLS, CELLS),
)
PAGES = st.one_of(
    st.sampled_from(["1", "0", "-1", "1-3", "3-1", "1,2", "1-", "-", "99999999999999999999", "1-999999", "a", ""]),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(), st.integers()),
)
DATES = st.one_of(
    st.sampled_from(["2026-03-04", "2026-03-04T10:00:00", "2026-03-04T10:00:00+05:00", "2026-13-01", "9999-12-31"]),
    st.datetimes().map(lambda moment: moment.isoformat()),
)
IDS = st.one_of(st.sampled_from(["m001", "m999", "e001", "e003", "c001", "t01", "", "m001 "]), st.text(max_size=8))
PLAIN = st.one_of(
    st.text(),
    st.sampled_from(["=SUM(A1:A3)", "=1/0", "@x", "\udcff", "\u2028", "\x00", "\x1f", "\x0b", "\ufffe", "x" * 10_000]),
)
NUMBERS = st.one_of(
    st.integers(min_value=-3, max_value=5),
    st.integers(),
    st.floats(),
    st.just(10**30),
    st.sampled_from([0.001, 1e-300]),
)
HARMLESS_CODE = st.sampled_from(["print(1)", "import sys; sys.exit(3)", "print('\\udcff')", "", "1/0"])
HARMLESS_COMMANDS = st.sampled_from(["echo hi", "exit 3", "printf '\\377'", "", "pwd"])


def _field_values(world_paths: list[str]) -> dict[str, st.SearchStrategy[Any]]:
    paths = st.one_of(st.sampled_from(world_paths), NEAR_MISS_PATHS, st.text(max_size=20))
    texts = st.lists(PLAIN, max_size=3)
    return {
        "path": paths,
        "dest_path": paths,
        "attachments": st.lists(paths, max_size=3),
        "filename": st.one_of(st.sampled_from(["operating_model.xlsx", "comps.xlsx", "../x"]), st.text(max_size=10)),
        "sheet": st.one_of(st.sampled_from(["Comps", "Model", "comps", "", "Sheet1"]), st.text(max_size=10)),
        "cell": CELLS,
        "cell_range": st.one_of(st.none(), RANGES),
        "value": st.one_of(PLAIN, NUMBERS),
        "pages": st.one_of(st.none(), PAGES),
        "page": NUMBERS,
        "max_chars": NUMBERS,
        "limit": NUMBERS,
        "timeout_s": NUMBERS,
        "recursive": st.booleans(),
        "message_id": IDS,
        "event_id": IDS,
        "channel": st.one_of(st.sampled_from(["deal-team", "general", "nope"]), st.text(max_size=10)),
        "folder": st.one_of(st.sampled_from(["inbox", "sent", "drafts"]), st.text(max_size=10)),
        "to": st.lists(st.one_of(st.just("a@b.com"), st.text(max_size=10)), max_size=3),
        "paragraphs": texts,
        "bullets": texts,
        "start_date": st.one_of(st.none(), DATES, st.text(max_size=10)),
        "end_date": st.one_of(st.none(), DATES, st.text(max_size=10)),
        "start": st.one_of(DATES, st.text(max_size=10)),
        "end": st.one_of(DATES, st.text(max_size=10)),
        "code": HARMLESS_CODE,
        "command": HARMLESS_COMMANDS,
    }


def arguments(name: str, world_paths: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Each argument of tool ``name`` left out, given a plausible value or given any JSON value; plus unknown ones.

    code_exec's ``code`` / ``command`` are never arbitrary (they would run); every other argument may be anything."""
    values = _field_values(world_paths)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in TOOLS[name].arguments.model_fields:
        plausible = values.get(field, PLAIN)
        fields[field] = plausible if field in ("code", "command") else st.one_of(plausible, plausible, JSON_VALUES)
    present = st.fixed_dictionaries({}, optional=fields)
    required = st.fixed_dictionaries(fields)
    unknown = st.dictionaries(st.text(max_size=8).filter(lambda key: key not in fields), JSON_VALUES, max_size=2)
    calls = st.one_of(required, required, present, st.builds(lambda known, extra: extra | known, present, unknown))
    if name.startswith("code_exec."):
        return calls
    return st.one_of(calls, st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=4))


VARIANTS = st.sampled_from([frozenset(), frozenset(BadVariant)])


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_every_tool_answers_or_refuses_arbitrary_arguments(name: str, base: Path, world_paths: list[str]) -> None:
    world = World(base / "world")
    before = _outside_state(base)

    @PER_TOOL
    @given(args=arguments(name, world_paths), variants=VARIANTS)
    def call(args: dict[str, Any], variants: frozenset[BadVariant]) -> None:
        try:
            text = runner_for(name, variants)(world, args)
        except (ToolError, PathEscapeError) as error:
            event("refused")
            assert str(error)
        else:
            event("answered")
            assert isinstance(text, str)
        assert _outside_state(base) == before, f"{name}{args} wrote outside the world"
        assert not os.path.exists("/tmp/fuzz-out.txt")

    call()


# The crashes this fuzzer found, kept as plain regression cases (each was an unhandled exception before the fix).
FOUND = [
    ("calendar.list_events", {"end_date": "9999-12-31"}),  # OverflowError: the day after the last date
    ("filesystem.write_file", {"path": "d/" * 2000 + "x.txt", "content": ""}),  # RecursionError in Path.mkdir
    ("docs.create_document", {"path": "out/a.docx", "title": "\x1f", "paragraphs": []}),  # lxml ValueError
    ("docs.append_paragraph", {"path": "docs/ic_memo.docx", "text": "\x00"}),
    ("docs.replace_text", {"path": "docs/ic_memo.docx", "old": "Project", "new": "\x0b"}),
    ("slides.add_slide", {"path": "out/d.pptx", "title": "\ufffe", "bullets": []}),
    ("sheets.write_cell", {"path": "models/comps.xlsx", "sheet": "Comps", "cell": "H1", "value": "\x1f"}),  # openpyxl
]


@pytest.mark.parametrize(("name", "args"), FOUND)
def test_the_crashes_found_are_answers_or_tool_errors(name: str, args: dict[str, Any], base: Path) -> None:
    try:
        text = runner_for(name)(World(base / "world"), args)
    except ToolError as error:
        assert "control character an office file cannot store" in str(error) or "more than 64 parts" in str(error)
    else:
        assert name == "calendar.list_events" and text.startswith("e0")
