"""The oracle runner's data flow: ${name} substitution, extraction and failure reporting."""

import pytest

from envs.oracle import OracleError, run_oracle, substitute, with_wrong_oracle
from envs.types import Oracle, OracleStep


class _RecordingTools:
    """A tiny tool table: each tool returns a canned text, and every call is recorded."""

    def __init__(self, outputs: dict[str, str]):
        self.outputs = outputs
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, name: str, args: dict) -> str:
        self.calls.append((name, args))
        if name not in self.outputs:
            raise KeyError(name)
        return self.outputs[name]


def test_substitute_recurses_into_lists_and_dicts():
    saved = {"a": "1", "b": "two"}
    assert substitute({"x": ["${a}", {"y": "$b!"}], "n": 3}, saved) == {"x": ["1", {"y": "two!"}], "n": 3}


def test_substitute_names_the_missing_reference():
    with pytest.raises(OracleError, match=r"\$\{missing\}"):
        substitute("${missing}", {})


def test_outputs_flow_into_later_arguments_and_the_answer():
    tools = _RecordingTools({"sheets.read_cell": " 412.5 \n", "code_exec.run_python": "exit_code: 0\nstdout:\n825.0\n"})
    oracle = Oracle(
        steps=[
            OracleStep(tool="sheets.read_cell", args={"cell": "C5"}, save_as="revenue"),
            OracleStep(
                tool="code_exec.run_python",
                args={"code": "print(${revenue} * 2)"},
                save_as="doubled",
                extract=r"stdout:\n(\S+)",
            ),
        ],
        answer="$$${doubled}m",
    )
    run = run_oracle(oracle, tools)
    assert tools.calls[1] == ("code_exec.run_python", {"code": "print(412.5 * 2)"})
    assert run.saved == {"revenue": "412.5", "doubled": "825.0"}
    assert run.answer == "$825.0m"


def test_failed_extraction_and_failed_tool_are_reported_with_the_step():
    tools = _RecordingTools({"docs.read_document": "no numbers here"})
    with pytest.raises(OracleError, match="pattern"):
        run_oracle(Oracle(steps=[OracleStep(tool="docs.read_document", save_as="x", extract=r"(\d+)")]), tools)
    with pytest.raises(OracleError, match=r"step 0 \(pdf.read_pdf\) failed"):
        run_oracle(Oracle(steps=[OracleStep(tool="pdf.read_pdf")]), tools)


def test_a_wrong_oracle_changes_only_the_first_answering_task(tmp_path):
    from envs.build import build_environment, load_tasks
    from envs.check import check_environment

    data = tmp_path / "data"
    build_environment(data)
    tasks = [t for t in load_tasks(data) if t.world_id == "ib-1"][:4]
    wrong, task_id = with_wrong_oracle(tasks)
    assert task_id == next(t.task_id for t in tasks if t.oracle and t.oracle.answer)
    assert [t.task_id for t in wrong] == [t.task_id for t in tasks]
    assert [t for t in wrong if t.task_id != task_id] == [t for t in tasks if t.task_id != task_id]
    checked = {r.task_id: r.passed for r in check_environment(wrong, data / "worlds").oracles}
    assert checked == {t.task_id: t.task_id != task_id for t in tasks}
