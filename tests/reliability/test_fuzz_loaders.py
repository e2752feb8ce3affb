"""Fuzzing the task loaders with what a hostile or broken task file holds: arbitrary bytes, arbitrary lines, rows that
are almost tasks, deep nesting, huge numbers, lone surrogates and line separators. The contract: a file loads, or the
loader raises ``TaskLoadError`` whose message starts with the file (and, for one bad row, names its line or row) —
never a raw RecursionError / ValueError / UnicodeDecodeError; and what loads saves and loads back the same."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from envs.apex import load_apex
from envs.jsonio import MAX_DEPTH, json_line
from envs.loaders import TaskLoadError, load_harbor, load_harbor_dir, load_jsonl, save_jsonl
from envs.types import AnswerNumeric, Domain, TaskSpec

DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE_LINES = st.sampled_from(
    [
        DEEP,
        "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
        "9" * 5000,
        '{"task_id": ' + "9" * 5000 + "}",
        '{"task_id": "a\\ud800"}',
        "\u2028",
        "\x85",
        "\ufeff{}",
        "{}",
        "[]",
        "null",
        "NaN",
        '"task"',
        "{",
    ]
)
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text())
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(), children, max_size=3)),
    max_leaves=10,
)
VALID = TaskSpec(
    task_id="ib-1-t",
    world_id="ib-1",
    domain=Domain.INVESTMENT_BANKING,
    prompt="What is FY2025 revenue?",
    rubric=[AnswerNumeric(expected=412.5)],
).model_dump(mode="json")
APEX = {
    "task_id": "apex-1",
    "world_id": "w1",
    "domain": "Investment Banking",
    "prompt": "What is revenue?",
    "rubric": [{"verifier_id": "v1", "criteria": "States revenue"}],
    "task_input_files": ["a.xlsx"],
    "expected_output": None,
    "gold_response": "412.5",
}


def near_miss(template: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``template`` with some fields replaced by arbitrary JSON, some dropped and some unknown ones added."""
    changed = st.dictionaries(st.sampled_from(sorted(template)), JSON_VALUES, max_size=3)
    dropped = st.sets(st.sampled_from(sorted(template)), max_size=2)
    added = st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2)
    return st.builds(
        lambda changes, drops, extra: {k: v for k, v in (template | changes | extra).items() if k not in drops},
        changed,
        dropped,
        added,
    )


def lines_of(template: dict[str, Any]) -> st.SearchStrategy[str]:
    """One line of a JSONL file: the template (under one of ten task ids), a near miss of it, any JSON value or any
    text (line breaks included)."""
    valid = st.integers(0, 9).map(lambda number: template | {"task_id": f"t{number}"})  # repeats: duplicate ids
    rows = st.one_of(valid, valid, near_miss(template), JSON_VALUES)
    return st.one_of(rows.map(lambda row: json.dumps(row, ensure_ascii=False)), st.text(), HOSTILE_LINES)


@contextmanager
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="fuzz-loaders-") as name:
        yield Path(name)


def assert_names_the_file(error: TaskLoadError, path: Path) -> None:
    assert type(error) is TaskLoadError
    assert str(error).startswith(f"{path}"), str(error)
    assert error.problems and all(reason for _, reason in error.problems)


def check_jsonl(path: Path) -> None:
    try:
        tasks = load_jsonl(path)
    except TaskLoadError as error:
        event(f"refused at {error.where.split(' ')[0] if error.where else 'file'}")
        assert_names_the_file(error, path)
        if error.where is not None:
            assert error.where.startswith("line ") and f"{path}, {error.where}: " in str(error)
        return
    event(f"loaded {min(len(tasks), 2)}+ tasks")
    resaved = path.with_suffix(".resaved.jsonl")
    save_jsonl(tasks, resaved)
    lines = [json_line(task.model_dump(mode="json")) for task in tasks]  # NaN-safe: compared as saved text
    assert [json_line(task.model_dump(mode="json")) for task in load_jsonl(resaved)] == lines


@given(st.binary())
def test_jsonl_of_arbitrary_bytes_loads_or_names_the_file(data: bytes) -> None:
    with folder() as root:
        path = root / "tasks.jsonl"
        path.write_bytes(data)
        check_jsonl(path)


@given(st.lists(lines_of(VALID), max_size=6), st.sampled_from(["\n", "\r\n", "\n\n"]))
def test_jsonl_of_arbitrary_lines_loads_or_names_file_and_line(lines: list[str], end: str) -> None:
    with folder() as root:
        path = root / "tasks.jsonl"
        path.write_text(end.join(lines), encoding="utf-8", errors="surrogatepass")
        check_jsonl(path)


def check_apex(path: Path) -> None:
    try:
        tasks = load_apex(path)
    except TaskLoadError as error:
        event(f"refused at {error.where.split(' ')[0] if error.where else 'file'}")
        assert_names_the_file(error, path)
        if error.where is not None:
            assert error.where.split(" ")[0] in ("line", "row") and f"{path}, {error.where}: " in str(error)
        return
    event(f"loaded {min(len(tasks), 2)}+ tasks")
    assert all(task.metadata["source"] == "apex" for task in tasks)


@given(st.binary())
def test_apex_of_arbitrary_bytes_loads_or_names_the_file(data: bytes) -> None:
    with folder() as root:
        path = root / "apex.json"
        path.write_bytes(data)
        check_apex(path)


@given(st.lists(st.one_of(st.just(APEX), near_miss(APEX), JSON_VALUES), max_size=5), st.booleans())
def test_apex_rows_as_a_list_or_lines_load_or_name_file_and_row(rows: list[Any], as_list: bool) -> None:
    with folder() as root:
        path = root / "apex.json"
        text = json.dumps(rows) if as_list else "\n".join(json.dumps(row) for row in rows)
        path.write_text(text, encoding="utf-8")
        check_apex(path)


@given(st.lists(lines_of(APEX), max_size=5))
def test_apex_of_arbitrary_lines_loads_or_names_the_file(lines: list[str]) -> None:
    with folder() as root:
        path = root / "apex.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        check_apex(path)


# --- Harbor task folders ---------------------------------------------------------------------------------------------

TOML_LINES = st.one_of(
    st.sampled_from(
        [
            "[metadata]",
            "[verifier]",
            "[agent]",
            "[[metadata]]",
            'difficulty = "easy"',
            'category = "files"',
            'tags = ["a", "b"]',
            "tags = [1, 2]",
            "tags = [[[]]]",
            "timeout_sec = 60",
            "timeout_sec = -1",
            "timeout_sec = 0",
            "timeout_sec = inf",
            "timeout_sec = nan",
            'timeout_sec = "60"',
            "timeout_sec = 1979-05-27T07:32:00Z",
            "difficulty = " + "9" * 5000,
            "difficulty = " + "[" * 5000,
            "difficulty = " + "[" * 300 + "]" * 300,
            "x = {a = {b = {c = 1}}}",
            'metadata = "flat"',
            "verifier = 3",
        ]
    ),
    st.text(),
)
FILE_BODIES = st.one_of(st.none(), st.binary(max_size=64), st.text(max_size=64).map(lambda t: t.encode()))


def write_task(
    task: Path, instruction: bytes | None, toml: bytes | None, test: bytes | None, solve: bytes | None
) -> None:
    task.mkdir(parents=True, exist_ok=True)
    for relative, content in (
        ("instruction.md", instruction),
        ("task.toml", toml),
        ("tests/test.sh", test),
        ("solution/solve.sh", solve),
    ):
        if content is not None:
            (task / relative).parent.mkdir(parents=True, exist_ok=True)
            (task / relative).write_bytes(content)


def check_harbor(task: Path) -> None:
    try:
        spec = load_harbor(task)
    except TaskLoadError as error:
        event("refused")
        assert_names_the_file(error, task)  # the folder, or a file inside it (task.toml)
        return
    event("loaded")
    assert spec.task_id == task.name and spec.prompt


@given(
    FILE_BODIES,
    st.one_of(st.lists(TOML_LINES, max_size=8).map(lambda lines: "\n".join(lines).encode()), FILE_BODIES),
    FILE_BODIES,
    FILE_BODIES,
)
def test_a_harbor_folder_of_arbitrary_files_loads_or_names_the_folder(
    instruction: bytes | None, toml: bytes | None, test: bytes | None, solve: bytes | None
) -> None:
    with folder() as root:
        task = root / "task"
        write_task(task, instruction, toml, test, solve)
        check_harbor(task)


NAMES = st.text(st.characters(blacklist_characters="/\x00", blacklist_categories=["Cs"]), min_size=1, max_size=20)


@given(st.lists(NAMES, max_size=3, unique=True), st.booleans())
def test_a_harbor_root_of_arbitrary_folder_names_loads_or_names_a_folder(names: list[str], good: bool) -> None:
    with folder() as root:
        tasks_root = root / "tasks"
        tasks_root.mkdir()
        for name in names:
            if name in (".", ".."):
                continue
            contents = [b"Do it.", b'[metadata]\ndifficulty = "easy"\n', b"exit 0", None] if good else [None] * 4
            write_task(tasks_root / name, *contents)
        try:
            tasks = load_harbor_dir(tasks_root)
        except TaskLoadError as error:
            assert type(error) is TaskLoadError and str(error).startswith(f"{tasks_root}"), str(error)
            return
        assert sorted(task.task_id for task in tasks) == sorted(n for n in names if not n.startswith("."))
