"""The environment and task files: what a team writes, and the one-line errors for what it gets wrong."""

import json
import re
from pathlib import Path

import pytest

from envs.byo.spec import EnvironmentFileError, expand, load_environment_file, load_task_file
from envs.types import Domain, Split

EXAMPLES = Path(__file__).parents[3] / "examples" / "environments"

GOOD = """
name: mine
servers:
  - {name: git, command: [mcp-server-git]}
worlds:
  - {id: w1, setup: [python, make.py, "{world}"]}
tasks: tasks.jsonl
probes:
  calls:
    - {tool: git_log, args: {repo_path: "."}}
"""


def write(folder: Path, text: str) -> Path:
    path = folder / "environment.yaml"
    path.write_text(text)
    return path


def test_the_shipped_examples_load(tmp_path: Path) -> None:
    for name in ("git-history", "sqlite-sales", "notes-folder"):
        spec = load_environment_file(EXAMPLES / name)
        tasks = load_task_file(EXAMPLES / name / spec.tasks, spec.name, {w.id for w in spec.worlds})
        assert {task.split for task in tasks} == {Split.TRAIN, Split.HELDOUT}
        assert all(task.oracle is None and task.domain is Domain.GENERAL for task in tasks)
        assert all(task.metadata["team_environment"] == spec.name for task in tasks)


def test_a_folder_names_its_environment_yaml(tmp_path: Path) -> None:
    write(tmp_path, GOOD)
    assert load_environment_file(tmp_path).name == "mine"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("{name: git, command: [mcp-server-git]}", "{name: git}"), "give exactly one of command (stdio) or url"),
        (("command: [mcp-server-git]", "url: http://10.0.0.5:80/mcp"), "is not on loopback"),
        (("command: [mcp-server-git]}", "command: [x], env: {GITHUB_TOKEN: abc}}"), "looks like a secret"),
        (("{name: git,", "{name: Git_2,"), "servers.0.name"),
        (("{tool: git_log,", "{tool: other.git_log,"), "no server named 'other'"),
        (("tasks: tasks.jsonl\n", ""), "give servers, worlds and tasks (or a verifiers environment)"),
        (("{id: w1, setup", "{id: w1, folder: x, setup"), "give setup or folder, not both"),
        (("tasks: tasks.jsonl", "tasks: tasks.jsonl\nverifiers: {id: x}"), "brings its own servers, worlds and tasks"),
    ],
)
def test_a_bad_environment_file_says_which_field_and_why(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    path = write(tmp_path, GOOD.replace(*change))
    with pytest.raises(EnvironmentFileError, match=re.escape(message)) as caught:
        load_environment_file(path)
    assert str(path) in str(caught.value)


def test_not_yaml_or_not_a_mapping_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFileError, match="not YAML"):
        load_environment_file(write(tmp_path, "name: [unclosed"))
    with pytest.raises(EnvironmentFileError, match="is a mapping"):
        load_environment_file(write(tmp_path, "- a list"))
    with pytest.raises(EnvironmentFileError, match="cannot read"):
        load_environment_file(tmp_path / "missing.yaml")


ROW = {"id": "t1", "world": "w1", "prompt": "Q?", "rubric": [{"kind": "answer_contains_all", "items": ["x"]}]}


def tasks_file(folder: Path, rows: list) -> Path:
    path = folder / "tasks.jsonl"
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def test_a_task_file_loads_with_defaults(tmp_path: Path) -> None:
    path = tasks_file(tmp_path, [ROW, ROW | {"id": "t2", "split": "heldout", "tier": "standard"}])
    train, heldout = load_task_file(path, "mine", {"w1"})
    assert (train.split, train.tier.value, heldout.split) == (Split.TRAIN, "toy", Split.HELDOUT)
    assert train.world_id == "w1" and train.prompt == "Q?"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([ROW, "{not json"], "line 2: not JSON"),
        ([ROW, ROW | {"world": "w9"}], "line 2: world 'w9' is not one of the file's worlds"),
        ([ROW, ROW | {"rubric": []}], "line 2: rubric"),
        ([ROW, ROW | {"split": "heldout"}], "task ids repeat: t1"),
        ([ROW, ROW | {"id": "t2"}], "no heldout task"),
        ([], "no task in the file"),
        (
            [ROW | {"rubric": [{"kind": "llm_judge", "criteria": "polite"}]}],
            "line 1: a train task cannot have an llm_judge",
        ),
    ],
)
def test_a_bad_task_file_names_the_line_and_loads_nothing(tmp_path: Path, rows: list, message: str) -> None:
    with pytest.raises(EnvironmentFileError, match=re.escape(message)):
        load_task_file(tasks_file(tmp_path, rows), "mine", {"w1"})


def test_placeholders_expand_in_nested_values() -> None:
    value = {"cmd": ["x", "{world}/db"], "cwd": "{env_dir}", "n": 3}
    assert expand(value, Path("/w"), Path("/e")) == {"cmd": ["x", "/w/db"], "cwd": "/e", "n": 3}
