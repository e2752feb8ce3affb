"""Hostile JSON (deep nesting, huge integers, line separators inside strings) never crashes the tool-call parser or a
loader: the parser answers with a correction the model can act on, a loader with an error naming file and line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.apex import load_apex
from envs.graders import grade
from envs.harness.parsing import parse_turn
from envs.jsonio import MAX_DEPTH, JsonError, json_line, json_lines, parse_json
from envs.loaders import TaskLoadError, load_harbor, load_jsonl, save_jsonl
from envs.types import AnswerNumeric, Domain, TaskSpec, VerifierReward
from evals.mcq import McqLoadError, load_mcq

DEEP = "[" * 100_000 + "]" * 100_000  # past the parser's own recursion limit: RecursionError inside json.loads
NESTED = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)  # parses, but is one level past the limit
HUGE_INT = "9" * 5000  # past Python's 4300-digit int conversion limit: ValueError inside json.loads
SEPARATORS = "a\u2028b\u2029c\x85d"  # str.splitlines splits on each of these


@pytest.mark.parametrize(
    ("text", "reason"),
    [(DEEP, "nested deeper than 100"), (NESTED, "nested deeper than 100"), (HUGE_INT, "more than 4300 digits")],
)
def test_parse_json_refuses_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(JsonError, match=reason):
        parse_json(text)


def test_parse_json_accepts_the_deepest_allowed_nesting() -> None:
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    assert parse_json('{"n": ' + "9" * 4300 + "}") == {"n": int("9" * 4300)}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ('{"name": "fs_read", "arguments": ' + DEEP + "}", "nested deeper than 100"),
        ('{"name": "fs_read", "arguments": {"x": ' + NESTED + "}}", "nested deeper than 100"),
        ('{"name": "fs_read", "arguments": {"n": ' + HUGE_INT + "}}", "more than 4300 digits"),
        ('{"name": "fs_read", "arguments": ' + json.dumps(DEEP) + "}", 'arguments" of fs_read is not valid JSON'),
        ('{"name": "fs_read", "arguments": ' + json.dumps('{"n": ' + HUGE_INT + "}") + "}", "more than 4300 digits"),
    ],
)
def test_a_hostile_tool_call_is_a_correction_not_a_crash(body: str, reason: str) -> None:
    parsed = parse_turn(f"<tool_call>{body}</tool_call>")
    assert not parsed.calls and parsed.final_answer is None
    assert len(parsed.errors) == 1 and reason in parsed.errors[0]


def _task(task_id: str, prompt: str = "What is revenue?") -> TaskSpec:
    rubric = [AnswerNumeric(expected=1)]
    return TaskSpec(task_id=task_id, world_id="ib-1", domain=Domain.INVESTMENT_BANKING, prompt=prompt, rubric=rubric)


@pytest.mark.parametrize(("bad", "reason"), [(DEEP, "nested deeper"), (f'{{"n": {HUGE_INT}}}', "4300 digits")])
def test_loaders_name_file_and_line_of_a_hostile_row(tmp_path: Path, bad: str, reason: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(_task("t1").model_dump_json() + "\n\n" + bad + "\n")
    with pytest.raises(TaskLoadError, match=rf"^{tasks}, line 3: invalid JSON: .*{reason}"):
        load_jsonl(tasks)
    apex = tmp_path / "apex.json"
    apex.write_text("[" + bad + "]")
    with pytest.raises(TaskLoadError, match=rf"^{apex}: invalid JSON: .*{reason}"):
        load_apex(apex)
    mcq = tmp_path / "mcq.jsonl"
    mcq.write_text('{"question": "q", "choices": ["a", "b"], "answer": "A"}\n' + bad + "\n")
    with pytest.raises(McqLoadError, match=rf"^{mcq}, line 2: invalid JSON: .*{reason}"):
        load_mcq(mcq)


@pytest.mark.parametrize(("bad", "reason"), [("[" * 100_000, "nested too deep"), (HUGE_INT, "4300 digits")])
def test_a_hostile_harbor_task_toml_is_a_load_error(tmp_path: Path, bad: str, reason: str) -> None:
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "instruction.md").write_text("Do it.")
    (task / "tests" / "test.sh").write_text("exit 0")
    (task / "task.toml").write_text(f"[metadata]\ndifficulty = {bad}\n")
    with pytest.raises(TaskLoadError, match=rf"^{task / 'task.toml'}: invalid TOML: .*{reason}"):
        load_harbor(task)


def test_line_separators_inside_strings_survive_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    tasks = [_task("t1", SEPARATORS), _task("t2")]
    save_jsonl(tasks, path)
    text = path.read_text(encoding="utf-8")
    assert text.isascii() and len(text.splitlines()) == 2  # escaped: any line splitter sees two lines
    assert load_jsonl(path) == tasks
    # a file another tool wrote with the separators raw still loads: lines end at \n only
    path.write_text(tasks[0].model_dump_json() + "\n" + tasks[1].model_dump_json() + "\n", encoding="utf-8")
    assert "\u2028" in path.read_text(encoding="utf-8")
    assert load_jsonl(path) == tasks


def test_json_line_and_json_lines_agree() -> None:
    text = json_line({"s": SEPARATORS}) + "\n \r\n" + json_line([1])
    assert [(n, parse_json(line)) for n, line in json_lines(text)] == [(1, {"s": SEPARATORS}), (4, [1])]


def test_a_hostile_verifier_reward_fails_the_criterion(tmp_path: Path) -> None:
    logs = tmp_path / "logs" / "verifier"
    logs.mkdir(parents=True)
    (logs / "reward.json").write_text('{"reward": ' + DEEP + "}")
    task = TaskSpec(task_id="t", world_id="t", domain=Domain.TERMINAL, prompt="p", rubric=[VerifierReward()])
    result = grade(task, None, tmp_path, tmp_path)
    assert not result.passed and "nested deeper" in result.criteria[0].detail


def test_the_app_cli_refuses_hostile_arguments_with_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "filesystem").mkdir()
    argv = [sys.executable, "-m", "envs.apps", "filesystem.list_dir", DEEP[:20_000], "--world", str(tmp_path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "nested deeper than 100" in result.stderr
