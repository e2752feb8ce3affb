"""Model-run code sees only its world and what the interpreter needs: not the checkout (held-out tasks), not
/etc/shadow, not a terminal task's verifier or solution; it runs as an unprivileged user without capabilities; and it
can still run python with the packages the tools need."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envs.apps import World, call_tool
from envs.harness.code_tools import CodeToolSession, app_cli_command
from envs.harness.terminal import TerminalToolSession, bundled_terminal_tasks, create_sandbox, harbor_task_dir
from envs.sandbox.limits import usable_bwrap

pytestmark = pytest.mark.skipif(usable_bwrap() is None, reason="bubblewrap cannot create a sandbox here")

CHECKOUT = Path(__file__).resolve().parents[2]
SECRET = "canary-secret-4f2b"


def _world(root: Path) -> World:
    (root / "filesystem").mkdir(parents=True)
    (root / "apps_data").mkdir()
    (root / "filesystem" / "notes.txt").write_text("mine\n")
    return World(root)


def _run_bash(world: World, command: str) -> str:
    """The output of ``command`` through the code_exec tool (an error result's text too)."""
    try:
        return call_tool(world, "code_exec.run_bash", {"command": command})
    except Exception as error:  # a non-zero exit comes back as a ToolError carrying the same text
        return str(error)


@pytest.fixture
def planted():
    """A canary in the checkout, where data/tasks/heldout.jsonl and the run store live."""
    canary = CHECKOUT / f".sandbox-canary-{os.getpid()}.jsonl"
    canary.write_text(f'{{"answer": "{SECRET}"}}\n')
    try:
        yield canary
    finally:
        canary.unlink(missing_ok=True)


@pytest.mark.parametrize("where", ["checkout", "/etc/shadow", "held-out tasks", "project sources"])
def test_code_exec_cannot_read_outside_its_world(tmp_path: Path, planted: Path, where: str) -> None:
    world = _world(tmp_path / "sandboxes" / "w1")
    target = {
        "checkout": planted,
        "/etc/shadow": Path("/etc/shadow"),
        "held-out tasks": CHECKOUT / "data" / "tasks" / "heldout.jsonl",
        "project sources": CHECKOUT / "envs" / "graders.py",
    }[where]
    if not target.exists():
        pytest.skip(f"{target} does not exist on this machine")
    output = _run_bash(world, f"cat {target}; echo; cat notes.txt")
    assert "No such file or directory" in output
    assert SECRET not in output and "mine" in output  # its own world it reads


def test_code_exec_runs_as_an_unprivileged_user_without_capabilities(tmp_path: Path) -> None:
    output = _run_bash(_world(tmp_path / "w"), "id -u; grep CapEff /proc/self/status")
    uid, caps = output.split("stdout:\n", 1)[1].split("\nstderr:", 1)[0].strip().split("\n")
    assert caps.split() == ["CapEff:", "0000000000000000"]  # so it cannot unmount what hides the host
    if os.getuid() == 0:
        assert uid == "65534"


def test_the_terminal_harness_cannot_read_its_tasks_verifier_or_solution(tmp_path: Path) -> None:
    task = next(task for task in bundled_terminal_tasks() if task.task_id == "top-words")
    folder = harbor_task_dir(task)
    session = TerminalToolSession(create_sandbox(task, tmp_path / "sandbox"))
    result = session.bash(f"cat {folder}/tests/test.sh; cat {folder}/solution/solve.sh; ls {folder}", 30)
    assert result.stderr.count("No such file or directory") == 3
    assert "uniq -c" not in result.stdout and "LOGS_DIR" not in result.stdout
    # ... while its interpreter still has every package the tools need
    packages = "import docx, numpy, openpyxl, pandas, pdfplumber, pptx; print('ok')"
    imported = session.bash(f'python -c "{packages}"', 60)
    assert imported.exit_code == 0 and imported.stdout.strip() == "ok", imported.stderr


def test_the_code_only_harness_still_reaches_the_app_cli_but_not_the_task_generators(tmp_path: Path) -> None:
    world = _world(tmp_path / "w")
    session = CodeToolSession(world.root)
    listed = session.bash(app_cli_command("filesystem.list_files", {}), 60)
    assert listed.exit_code == 0 and listed.stdout.strip() == "notes.txt", listed.stderr
    generators = session.bash("python -c 'import envs.taskgen, envs.graders'", 30)
    assert generators.exit_code == 1 and "No module named 'envs.taskgen'" in generators.stderr
