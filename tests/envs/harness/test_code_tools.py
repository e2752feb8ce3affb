"""The code-only harness: each tool's happy path and bad input, path confinement, the app CLI, the code-only oracle on
the generated tasks, and one rollout through the agent loop against the scripted engine."""

import asyncio
import json
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import openpyxl
import pytest

from envs.apps.__main__ import main as app_cli
from envs.build import build_environment, load_tasks
from envs.graders import grade
from envs.harness.agent import AgentSetup, HarnessConfig, run_group
from envs.harness.code_tools import (
    CodeToolSession,
    app_cli_command,
    code_only_envs,
    code_only_oracle,
    run_code_only_oracle,
)
from envs.harness.engine_client import CompletionsClient
from envs.harness.tools import ToolOutcome
from envs.sandbox.limits import usable_bwrap
from envs.sandbox.world_copy import fork_world
from envs.types import TaskSpec

from .conftest import Reply


@pytest.fixture
def world_root(tmp_path: Path) -> Path:
    root = tmp_path / "world"
    fs = root / "filesystem"
    (fs / "notes").mkdir(parents=True)
    (fs / "notes" / "a.txt").write_text("alpha\nrevenue 412.5\ngamma\nrevenue 7\n")
    (fs / "data.csv").write_text("k,v\nx,1\n")
    workbook = openpyxl.Workbook()
    workbook.active["A1"] = 42
    workbook.save(fs / "model.xlsx")
    (root / "apps_data" / "mail").mkdir(parents=True)
    (root / "apps_data" / "mail" / "mailbox.json").write_text('{"messages": []}\n')
    (tmp_path / "secret.txt").write_text("outside the world\n")
    return root


def call(session: CodeToolSession, name: str, args: dict) -> ToolOutcome:
    return asyncio.run(session.call(name, args))


def test_tool_listing_is_exactly_the_opencode_set(world_root):
    specs = asyncio.run(CodeToolSession(world_root).list_tools())
    assert [spec["name"] for spec in specs] == ["bash", "glob", "read", "grep", "write", "edit", "todowrite"]
    bash = specs[0]
    assert bash["input_schema"]["required"] == ["command"] and "openpyxl" in bash["description"]


def test_bash_runs_in_filesystem_with_the_packages_on_path(world_root):
    out = call(
        CodeToolSession(world_root), "bash", {"command": "pwd; cat notes/a.txt | wc -l; python -c 'import openpyxl'"}
    )
    assert not out.is_error, out.text
    assert out.text.startswith("exit_code: 0\nstdout:\n") and f"{world_root}/filesystem\n4\n" in out.text


def test_bash_failures_are_error_outcomes(world_root):
    session = CodeToolSession(world_root)
    failed = call(session, "bash", {"command": "echo oops >&2; exit 3"})
    assert failed.is_error and failed.text.startswith("exit_code: 3") and "oops" in failed.text
    slow = call(session, "bash", {"command": "sleep 5", "timeout_s": 0.3})
    assert slow.is_error and slow.timed_out and "timed out after 0.3 s" in slow.text
    assert call(session, "bash", {}).text == "bash: missing argument 'command'"
    assert "unknown argument 'cwd'" in call(session, "bash", {"command": "ls", "cwd": "/"}).text
    too_long = call(session, "bash", {"command": "ls", "timeout_s": 10_000}).text
    assert too_long == "bash: argument 'timeout_s': Input should be less than or equal to 600 (got 10000)"


def test_glob(world_root):
    session = CodeToolSession(world_root)
    assert call(session, "glob", {"pattern": "**/*.txt"}).text == "notes/a.txt"
    assert call(session, "glob", {"pattern": "*", "path": "notes"}).text == "notes/a.txt"
    assert call(session, "glob", {"pattern": "*.json", "path": "../apps_data/mail"}).text == (
        "../apps_data/mail/mailbox.json"
    )
    assert call(session, "glob", {"pattern": "*.pdf"}).text == "no files match '*.pdf' under '.'"
    missing = call(session, "glob", {"pattern": "*", "path": "nope"})
    assert missing.is_error and "no folder 'nope'" in missing.text
    up = call(session, "glob", {"pattern": "../../*"})
    assert up.is_error and "without '..'" in up.text


def test_read(world_root):
    session = CodeToolSession(world_root)
    assert call(session, "read", {"path": "notes/a.txt"}).text == "1\talpha\n2\trevenue 412.5\n3\tgamma\n4\trevenue 7"
    window = call(session, "read", {"path": "notes/a.txt", "offset": 2, "limit": 1}).text
    assert window == "2\trevenue 412.5\n[… lines 3-4 not shown; read on with offset=3]"
    binary = call(session, "read", {"path": "model.xlsx"})
    assert binary.is_error and "binary" in binary.text and "openpyxl.load_workbook('model.xlsx'" in binary.text
    assert "no file 'nope.txt'" in call(session, "read", {"path": "nope.txt"}).text
    assert "is a folder" in call(session, "read", {"path": "notes"}).text
    assert "offset 9 is past the end" in call(session, "read", {"path": "notes/a.txt", "offset": 9}).text
    zero = call(session, "read", {"path": "notes/a.txt", "offset": 0})
    assert zero.is_error and "argument 'offset': Input should be greater than or equal to 1" in zero.text


def test_grep(world_root):
    session = CodeToolSession(world_root)
    assert (
        call(session, "grep", {"pattern": r"revenue \d+"}).text
        == "notes/a.txt:2: revenue 412.5\nnotes/a.txt:4: revenue 7"
    )
    assert call(session, "grep", {"pattern": "x", "glob": "*.csv"}).text == "data.csv:2: x,1"
    assert call(session, "grep", {"pattern": "messages", "path": "../apps_data"}).text == (
        '../apps_data/mail/mailbox.json:1: {"messages": []}'
    )
    assert call(session, "grep", {"pattern": "zzz"}).text == "no matches for 'zzz' under '.'"
    bad = call(session, "grep", {"pattern": "(unclosed"})
    assert bad.is_error and "invalid regular expression" in bad.text


def test_write_and_edit(world_root):
    session = CodeToolSession(world_root)
    assert (
        call(session, "write", {"path": "out/new.md", "content": "a b a\n"}).text == "wrote 6 characters to out/new.md"
    )
    assert (world_root / "filesystem" / "out" / "new.md").read_text() == "a b a\n"
    twice = call(session, "edit", {"path": "out/new.md", "old_string": "a", "new_string": "c"})
    assert twice.is_error and "occurs 2 times" in twice.text
    assert not call(session, "edit", {"path": "out/new.md", "old_string": "a b", "new_string": "x"}).is_error
    assert (world_root / "filesystem" / "out" / "new.md").read_text() == "x a\n"
    everywhere = call(
        session, "edit", {"path": "out/new.md", "old_string": "a", "new_string": "b", "replace_all": True}
    )
    assert everywhere.text == "replaced 1 occurrence(s) in out/new.md"
    assert "not found" in call(session, "edit", {"path": "out/new.md", "old_string": "q", "new_string": "r"}).text
    assert "the same" in call(session, "edit", {"path": "out/new.md", "old_string": "x", "new_string": "x"}).text
    assert "binary" in call(session, "edit", {"path": "model.xlsx", "old_string": "x", "new_string": "y"}).text
    assert "is a folder" in call(session, "write", {"path": "notes", "content": "x"}).text
    assert "missing argument 'content'" in call(session, "write", {"path": "x.txt"}).text


def test_todowrite(world_root):
    session = CodeToolSession(world_root)
    todos = [{"content": "read model", "status": "completed"}, {"content": "write memo", "status": "in_progress"}]
    assert call(session, "todowrite", {"todos": todos}).text == "1/2 completed\n[x] read model\n[~] write memo"
    bad = call(session, "todowrite", {"todos": [{"content": "x", "status": "done"}]})
    assert bad.is_error and "todos" in bad.text
    unknown = call(session, "nope", {})
    assert unknown.is_error and "unknown tool 'nope'" in unknown.text and "todowrite" in unknown.text


def test_paths_cannot_leave_the_world(world_root):
    session = CodeToolSession(world_root)
    (world_root / "filesystem" / "link.txt").symlink_to(world_root.parent / "secret.txt")
    (world_root / "filesystem" / "linkdir").symlink_to(world_root.parent)
    for name, args in [
        ("read", {"path": "../../secret.txt"}),
        ("read", {"path": str(world_root.parent / "secret.txt")}),
        ("read", {"path": "link.txt"}),
        ("read", {"path": "~/x"}),
        ("write", {"path": "../../evil.txt", "content": "x"}),
        ("edit", {"path": "linkdir/secret.txt", "old_string": "outside", "new_string": "x"}),
        ("grep", {"pattern": "x", "path": "/etc"}),
        ("glob", {"pattern": "*", "path": "../.."}),
    ]:
        out = call(session, name, args)
        assert out.is_error and ("leaves the world" in out.text or "absolute paths" in out.text), (name, out.text)
    assert not (world_root.parent / "evil.txt").exists()
    assert call(session, "grep", {"pattern": "outside the"}).text.startswith("no matches")  # symlinks out: skipped
    assert "secret" not in call(session, "glob", {"pattern": "**/*"}).text


@pytest.mark.skipif(usable_bwrap() is None, reason="bubblewrap cannot create a sandbox here: only rlimits apply")
def test_bash_cannot_write_outside_the_world_under_bwrap(world_root):
    outside = world_root.parent / "escaped.txt"
    out = call(CodeToolSession(world_root), "bash", {"command": f"echo x > {outside}; echo y > ../apps_data/ok.txt"})
    assert not outside.exists(), out.text
    assert (world_root / "apps_data" / "ok.txt").read_text() == "y\n"  # the world itself stays writable


def test_app_cli(world_root, capsys):
    assert app_cli(["filesystem.read_file", '{"path": "notes/a.txt"}', "--world", str(world_root)]) == 0
    assert capsys.readouterr().out == "alpha\nrevenue 412.5\ngamma\nrevenue 7\n\n"
    assert app_cli(["filesystem.read_file", '{"path": "../x"}', "--world", str(world_root)]) == 1
    assert "leaves the world root" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        app_cli(["filesystem.read_file", "{bad json", "--world", str(world_root)])
    assert exit_info.value.code == 2 and "not valid JSON" in capsys.readouterr().err


def test_an_app_cli_call_loads_only_its_app(world_root):
    """Every bash line of the code-only harness starts an interpreter: a filesystem call must not pay for the office
    libraries (all nine apps cost 1.6 s of imports per call)."""
    probe = (
        "import sys; from envs.apps.__main__ import main; "
        f"main(['filesystem.list_files', '{{}}', '--world', {str(world_root)!r}]); "
        "print(sorted(m for m in ('openpyxl', 'pycel', 'pdfplumber', 'pptx', 'docx') if m in sys.modules))"
    )
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]" and "notes/a.txt" in done.stdout


# --- the code-only oracle on the generated tasks ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> tuple[Path, list[TaskSpec]]:
    out = tmp_path_factory.mktemp("env") / "data"
    build_environment(out)
    return out / "worlds", load_tasks(out)


def stratified_sample(tasks: list[TaskSpec]) -> list[TaskSpec]:
    """The task with the fewest oracle steps in every (domain, tier): each step costs a ~1 s interpreter start."""
    by_length = sorted(tasks, key=lambda task: len(task.oracle.steps))
    return [
        next(t for t in by_length if (t.domain, t.tier) == stratum)
        for stratum in sorted({(t.domain, t.tier) for t in tasks})
    ]


def oracle_failures(tasks: list[TaskSpec], worlds: Path) -> list[str]:
    failures = []
    for task in tasks:
        with tempfile.TemporaryDirectory() as scratch:
            copy = fork_world(worlds / task.world_id, Path(scratch) / task.world_id)
            try:
                run = run_code_only_oracle(task, CodeToolSession(copy))
                result = grade(task, run.answer, worlds / task.world_id, copy)
            except Exception as error:
                failures.append(f"{task.task_id}: {type(error).__name__}: {error}")
                continue
            if not result.passed:
                failures.append(f"{task.task_id}: {[c.detail for c in result.criteria if not c.passed]}")
    return failures


def test_code_only_oracle_solves_a_stratified_sample(environment):
    worlds, tasks = environment
    sample = stratified_sample(tasks)
    assert len(sample) == len({(task.domain, task.tier) for task in tasks}) == 9
    assert oracle_failures(sample, worlds) == []


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~600 oracle steps at ~1 s each: past the default 300 s
def test_code_only_oracle_solves_every_generated_task(environment):
    worlds, tasks = environment
    assert oracle_failures(tasks, worlds) == []


def test_code_only_oracle_is_bash_calls_of_the_app_cli(environment):
    _, tasks = environment
    task = next(t for t in tasks if any("${" in json.dumps(step.args) for step in t.oracle.steps))
    calls = code_only_oracle(task)
    assert [c.name for c in calls] == ["bash"] * len(task.oracle.steps)
    assert [c.arguments["command"] for c in calls] == [app_cli_command(s.tool, s.args) for s in task.oracle.steps]
    assert any("${" in c.arguments["command"] for c in calls)  # filled in by the runner from earlier outputs
    assert app_cli_command("mail.read_message", {"message_id": "it's"}) == (
        'python -m envs.apps mail.read_message \'{"message_id": "it\'"\'"\'s"}\' --world ..'
    )


def test_code_only_rollout_through_the_agent_loop(environment, scripted, tokenizer):
    worlds, tasks = environment
    task = next(t for t in tasks if len(t.oracle.steps) == 1 and t.oracle.answer and "${" in t.oracle.answer)
    with tempfile.TemporaryDirectory() as scratch:
        answer = run_code_only_oracle(task, CodeToolSession(fork_world(worlds / task.world_id, Path(scratch) / "w")))
    [oracle_call] = code_only_oracle(task)
    model = f"code-only-{uuid.uuid4().hex[:8]}"
    tool_call = json.dumps({"name": "bash", "arguments": oracle_call.arguments})
    scripted.scripts[model] = [Reply(f"<tool_call>\n{tool_call}\n</tool_call>"), Reply(answer.answer)]
    config = HarnessConfig(max_turns=4, max_tokens_per_turn=2000, context_budget_tokens=60_000, agent_timeout_s=60)

    async def go():
        async with CompletionsClient(scripted.url, model, timeout_s=30) as engine:
            agent = AgentSetup(engine, tokenizer, config, harness="code_only")
            return await run_group(task, code_only_envs(task, worlds), agent, group_id="g", n=1)

    [trajectory] = asyncio.run(go())
    assert trajectory.error is None and trajectory.passed and trajectory.reward == 1.0
    assert trajectory.harness == "code_only" and trajectory.final_answer == answer.answer
    [record] = trajectory.tool_calls
    assert (record.tool, record.ok) == ("bash", True)
