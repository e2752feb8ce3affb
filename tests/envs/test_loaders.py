"""Loaders: our JSONL (round trip, atomic save), APEX-Agents rows and Harbor task folders, and their error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.apex import apex_domain, load_apex
from envs.loaders import (
    TaskLoadError,
    load_harbor,
    load_harbor_dir,
    load_jsonl,
    save_jsonl,
)
from envs.types import (
    AnswerContainsAll,
    AnswerEquals,
    AnswerNumeric,
    DocxContains,
    Domain,
    FileExists,
    FileUnchanged,
    LlmJudge,
    Oracle,
    OracleStep,
    PptxContains,
    Split,
    TaskSpec,
    Tier,
    VerifierReward,
    XlsxCellEquals,
)


def _task(task_id: str = "ib-1-toy-0001", **changes: object) -> TaskSpec:
    fields: dict[str, object] = {
        "task_id": task_id,
        "world_id": "ib-1",
        "domain": Domain.INVESTMENT_BANKING,
        "prompt": "What is FY2025 revenue?",
        "rubric": [AnswerNumeric(expected=412.5)],
    }
    return TaskSpec(**(fields | changes))


# --- our JSONL -------------------------------------------------------------------------------------------------------


def test_save_then_load_round_trips_every_criterion_kind(tmp_path: Path) -> None:
    rich = _task(
        "ib-1-deliverable-0002",
        tier=Tier.DELIVERABLE,
        split=Split.HELDOUT,
        rubric=[
            AnswerEquals(expected="Acme", exact=True),
            AnswerNumeric(expected=-12.5, rel_tol=0.01),
            AnswerContainsAll(items=["a", "b"]),
            FileExists(path="out/memo.docx"),
            XlsxCellEquals(path="m.xlsx", sheet="Model", cell="C5", expected=412.5),
            XlsxCellEquals(path="m.xlsx", sheet="Model", cell="A1", expected="Revenue"),
            DocxContains(path="out/memo.docx", items=["EBITDA"]),
            PptxContains(path="deck.pptx", items=["Q3"]),
            FileUnchanged(path="m.xlsx"),
            LlmJudge(criteria="States the revenue", verifier_id="v1"),
            VerifierReward(min_reward=0.5),
        ],
        input_files=["m.xlsx"],
        expected_outputs=["out/memo.docx"],
        oracle=Oracle(steps=[OracleStep(tool="sheets.read_cell", args={"cell": "C5"}, save_as="rev")], answer="${rev}"),
        metadata={"source": "test", "nested": {"n": 1}},
    )
    tasks = [_task(), rich]
    path = tmp_path / "sub" / "tasks.jsonl"
    save_jsonl(tasks, path)
    assert load_jsonl(path) == tasks
    assert len(path.read_text().splitlines()) == 2


def test_save_replaces_the_file_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    save_jsonl([_task("a"), _task("b")], path)
    save_jsonl([_task("c")], path)
    assert [task.task_id for task in load_jsonl(path)] == ["c"]
    assert [p.name for p in tmp_path.iterdir()] == ["tasks.jsonl"]


def test_save_of_an_empty_list_loads_back_empty(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    save_jsonl([], path)
    assert load_jsonl(path) == []


def test_save_refuses_duplicate_task_ids(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="duplicate task_id 'a'"):
        save_jsonl([_task("a"), _task("a")], tmp_path / "tasks.jsonl")
    assert not (tmp_path / "tasks.jsonl").exists()


def _write_lines(path: Path, rows: list[object]) -> Path:
    path.write_text("\n".join(row if isinstance(row, str) else json.dumps(row) for row in rows) + "\n")
    return path


def _good_row(task_id: str = "t1") -> dict[str, object]:
    return json.loads(_task(task_id).model_dump_json())


def test_bad_json_line_names_file_and_line_and_loads_nothing(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "tasks.jsonl", [_good_row("t1"), "{not json"])
    with pytest.raises(TaskLoadError) as error:
        load_jsonl(path)
    assert str(path) in str(error.value)
    assert "line 2" in str(error.value)
    assert "invalid JSON" in str(error.value)


def test_missing_field_is_named(tmp_path: Path) -> None:
    row = _good_row()
    del row["prompt"]
    path = _write_lines(tmp_path / "tasks.jsonl", [row])
    with pytest.raises(TaskLoadError, match=r"tasks\.jsonl, line 1: field 'prompt': is required but missing"):
        load_jsonl(path)


def test_wrong_type_inside_a_criterion_names_the_nested_field(tmp_path: Path) -> None:
    row = _good_row()
    row["rubric"] = [{"kind": "answer_numeric", "expected": "a lot"}]
    path = _write_lines(tmp_path / "tasks.jsonl", [_good_row("t0"), row])
    with pytest.raises(TaskLoadError) as error:
        load_jsonl(path)
    message = str(error.value)
    assert "line 2" in message
    assert "field 'rubric[0].expected'" in message
    assert "'a lot'" in message
    assert error.value.problems[0][0] == "rubric[0].expected"


def test_unknown_criterion_kind_and_unknown_field_are_reported(tmp_path: Path) -> None:
    row = _good_row()
    row["rubric"] = [{"kind": "answer_vibes"}]
    row["colour"] = "blue"
    path = _write_lines(tmp_path / "tasks.jsonl", [row])
    with pytest.raises(TaskLoadError) as error:
        load_jsonl(path)
    message = str(error.value)
    assert "field 'colour': is not a known field" in message
    assert "answer_vibes" in message


def test_duplicate_task_ids_are_refused(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "tasks.jsonl", [_good_row("t1"), "", _good_row("t1")])
    with pytest.raises(TaskLoadError, match=r"line 3: field 'task_id': duplicate task_id 't1' \(first at line 1\)"):
        load_jsonl(path)


def test_missing_file_is_a_load_error(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError, match="cannot read"):
        load_jsonl(tmp_path / "nope.jsonl")


# --- APEX-Agents -----------------------------------------------------------------------------------------------------


def _apex_row(task_id: str = "task_abc", domain: str = "Investment Banking") -> dict[str, object]:
    return {
        "task_id": task_id,
        "task_name": "Revenue bridge",
        "world_id": "world_ib_3",
        "domain": domain,
        "prompt": "Build the revenue bridge and report FY25 revenue.",
        "rubric": [
            {"verifier_id": "v-1", "criteria": "States FY25 revenue of $412.5m"},
            {"verifier_id": "v-2", "criteria": "Mentions the FX impact", "criteria_explanation": "extra"},
        ],
        "task_input_files": ["models/bridge.xlsx"],
        "expected_output": "message_in_console",
        "gold_response": "FY25 revenue was $412.5m.",
    }


def test_apex_json_list_maps_rows_to_llm_judge_tasks(tmp_path: Path) -> None:
    path = tmp_path / "apex.json"
    path.write_text(json.dumps([_apex_row("a"), _apex_row("b", domain="Law")]))
    first, second = load_apex(path)
    assert first.domain == Domain.INVESTMENT_BANKING
    assert second.domain == Domain.CORPORATE_LAW
    assert first.rubric == [
        LlmJudge(criteria="States FY25 revenue of $412.5m", verifier_id="v-1"),
        LlmJudge(criteria="Mentions the FX impact", verifier_id="v-2"),
    ]
    assert first.input_files == ["models/bridge.xlsx"]
    assert first.expected_outputs == ["message_in_console"]
    assert first.metadata["gold_response"] == "FY25 revenue was $412.5m."
    assert first.metadata["task_name"] == "Revenue bridge"
    assert first.metadata["apex_domain"] == "Investment Banking"


def test_apex_jsonl_with_string_input_file_and_null_outputs(tmp_path: Path) -> None:
    row = _apex_row() | {"task_input_files": "inputs/brief.pdf", "expected_output": None, "gold_response": None}
    path = _write_lines(tmp_path / "apex.jsonl", [row])
    (task,) = load_apex(path)
    assert task.input_files == ["inputs/brief.pdf"]
    assert task.expected_outputs == []
    assert task.metadata["gold_response"] is None


@pytest.mark.parametrize(
    ("name", "domain"),
    [
        ("Investment Banking", Domain.INVESTMENT_BANKING),
        ("management consulting", Domain.MANAGEMENT_CONSULTING),
        ("Management-Consulting", Domain.MANAGEMENT_CONSULTING),
        ("Law", Domain.CORPORATE_LAW),
        ("Corporate Law", Domain.CORPORATE_LAW),
        ("corporate_law", Domain.CORPORATE_LAW),
        ("terminal", Domain.TERMINAL),
    ],
)
def test_apex_domain_names(name: str, domain: Domain) -> None:
    assert apex_domain(name) == domain


def test_apex_unknown_domain_names_file_row_and_field(tmp_path: Path) -> None:
    path = tmp_path / "apex.json"
    path.write_text(json.dumps([_apex_row("a"), _apex_row("b", domain="Medicine")]))
    with pytest.raises(TaskLoadError) as error:
        load_apex(path)
    message = str(error.value)
    assert message.startswith(f"{path}, row 2: field 'domain': unknown domain 'Medicine'")
    assert "Investment Banking" in message


def test_apex_missing_criteria_and_wrong_type_are_named(tmp_path: Path) -> None:
    row = _apex_row()
    row["rubric"] = [{"verifier_id": "v-1"}]
    row["prompt"] = 42
    path = _write_lines(tmp_path / "apex.jsonl", [row])
    with pytest.raises(TaskLoadError) as error:
        load_apex(path)
    fields = [field for field, _ in error.value.problems]
    assert fields == ["prompt", "rubric[0].criteria"]
    assert "line 1" in str(error.value)


def test_apex_bad_json_list_and_non_object_row(tmp_path: Path) -> None:
    path = tmp_path / "apex.json"
    path.write_text('[{"task_id": ')
    with pytest.raises(TaskLoadError, match="invalid JSON"):
        load_apex(path)
    path.write_text(json.dumps([_apex_row(), "just text"]))
    with pytest.raises(TaskLoadError, match="row 2"):
        load_apex(path)


def test_apex_task_id_with_a_slash_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "apex.json"
    path.write_text(json.dumps([_apex_row("ib/1")]))
    with pytest.raises(TaskLoadError, match=r"row 1: field 'task_id'.*path separators"):
        load_apex(path)


# --- Harbor ----------------------------------------------------------------------------------------------------------

_TOML = """
version = "1.0"

[metadata]
difficulty = "medium"
category = "file-operations"
tags = ["bash", "files"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 600

[environment]
build_timeout_sec = 600.0
"""


def _harbor_task(root: Path, name: str, toml: str = _TOML, solution: bool = True) -> Path:
    task_dir = root / name
    (task_dir / "tests").mkdir(parents=True)
    (task_dir / "instruction.md").write_text("Create hello.txt containing 'hi'.\n")
    (task_dir / "task.toml").write_text(toml)
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    if solution:
        (task_dir / "solution").mkdir()
        (task_dir / "solution" / "solve.sh").write_text("#!/bin/bash\necho hi > hello.txt\n")
    return task_dir


def test_harbor_task_folder(tmp_path: Path) -> None:
    task = load_harbor(_harbor_task(tmp_path, "hello-world"))
    assert task.task_id == task.world_id == "hello-world"
    assert task.domain == Domain.TERMINAL
    assert task.prompt == "Create hello.txt containing 'hi'."
    assert task.rubric == [VerifierReward(min_reward=1.0)]
    assert task.metadata["difficulty"] == "medium"
    assert task.metadata["category"] == "file-operations"
    assert task.metadata["tags"] == ["bash", "files"]
    assert task.metadata["verifier_timeout_sec"] == 120.0
    assert task.metadata["agent_timeout_sec"] == 600.0
    assert task.oracle is not None
    (step,) = task.oracle.steps
    assert step.tool == "code_exec.run_bash"
    assert step.args == {"command": "#!/bin/bash\necho hi > hello.txt\n", "timeout_s": 600.0}


def test_harbor_task_without_solution_or_tables(tmp_path: Path) -> None:
    task = load_harbor(_harbor_task(tmp_path, "bare", toml='version = "1.0"\n', solution=False))
    assert task.oracle is None
    assert task.metadata["tags"] == []
    assert task.metadata["agent_timeout_sec"] is None


def test_harbor_missing_test_script_names_the_folder_and_file(tmp_path: Path) -> None:
    task_dir = _harbor_task(tmp_path, "no-tests")
    (task_dir / "tests" / "test.sh").unlink()
    with pytest.raises(TaskLoadError, match=r"no-tests: field 'tests/test\.sh': is missing"):
        load_harbor(task_dir)


def test_harbor_bad_toml_names_the_file(tmp_path: Path) -> None:
    task_dir = _harbor_task(tmp_path, "bad-toml", toml="[metadata\ndifficulty = 'x'\n")
    with pytest.raises(TaskLoadError) as error:
        load_harbor(task_dir)
    assert str(task_dir / "task.toml") in str(error.value)
    assert "invalid TOML" in str(error.value)


def test_harbor_wrong_type_in_toml_names_the_field(tmp_path: Path) -> None:
    task_dir = _harbor_task(tmp_path, "bad-timeout", toml='[agent]\ntimeout_sec = "soon"\n[metadata]\ntags = "x"\n')
    with pytest.raises(TaskLoadError) as error:
        load_harbor(task_dir)
    assert str(task_dir / "task.toml") in str(error.value)
    assert [field for field, _ in error.value.problems] == ["metadata.tags", "agent.timeout_sec"]


def test_harbor_missing_instruction_and_task_toml(tmp_path: Path) -> None:
    task_dir = _harbor_task(tmp_path, "no-instruction")
    (task_dir / "instruction.md").unlink()
    with pytest.raises(TaskLoadError, match=r"field 'instruction\.md': is missing"):
        load_harbor(task_dir)
    other = _harbor_task(tmp_path, "no-toml")
    (other / "task.toml").unlink()
    with pytest.raises(TaskLoadError, match=r"field 'task\.toml': is missing"):
        load_harbor(other)


def test_harbor_dir_loads_sorted_and_one_bad_folder_loads_nothing(tmp_path: Path) -> None:
    _harbor_task(tmp_path, "b-task")
    _harbor_task(tmp_path, "a-task")
    (tmp_path / ".cache").mkdir()
    (tmp_path / "README.md").write_text("tasks")
    (tmp_path / "__pycache__").mkdir()  # what Python writes on importing the bundled tasks' package
    assert [task.task_id for task in load_harbor_dir(tmp_path)] == ["a-task", "b-task"]
    (tmp_path / "c-task").mkdir()
    with pytest.raises(TaskLoadError, match=r"c-task: field 'instruction\.md'"):
        load_harbor_dir(tmp_path)


def test_harbor_dir_without_tasks(tmp_path: Path) -> None:
    with pytest.raises(TaskLoadError, match="holds no task folders"):
        load_harbor_dir(tmp_path)


def test_harbor_oracle_keeps_the_shell_dollar_signs(tmp_path):
    """The oracle's arguments are ${name} templates: solve.sh's own "$VAR" must come out of substitution intact."""
    from envs.loaders import load_harbor
    from envs.oracle import substitute

    task_dir = tmp_path / "dollar-task"
    (task_dir / "tests").mkdir(parents=True)
    (task_dir / "solution").mkdir()
    (task_dir / "instruction.md").write_text("Print HOME.")
    (task_dir / "task.toml").write_text("")
    (task_dir / "tests" / "test.sh").write_text("true\n")
    (task_dir / "solution" / "solve.sh").write_text('echo "$HOME" ${USER:-me}\n')
    step = load_harbor(task_dir).oracle.steps[0]
    assert substitute(step.args, {})["command"] == 'echo "$HOME" ${USER:-me}\n'
