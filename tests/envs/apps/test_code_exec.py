"""code_exec: output format, cwd, exit codes, timeouts that kill the whole process group, output caps."""

from __future__ import annotations

import sys
import time

import pytest

from envs.apps import ToolError, World, call_tool
from envs.apps.code_exec import MAX_OUTPUT_BYTES, run_limited


def test_run_python_in_the_filesystem_root(world: World) -> None:
    out = call_tool(world, "code_exec.run_python", {"code": "print(open('notes/data.csv').read().splitlines()[1])"})
    assert out == "exit_code: 0\nstdout:\nAcme,412.5\n\nstderr:\n"


def failed_text(world: World, tool: str, args: dict) -> str:
    """A program that fails is a tool error whose text is the full rendered result (exit code, stdout, stderr)."""
    with pytest.raises(ToolError) as failure:
        call_tool(world, tool, args)
    return str(failure.value)


def test_run_python_reports_errors(world: World) -> None:
    out = failed_text(world, "code_exec.run_python", {"code": "import sys; print('x'); sys.exit(3)"})
    assert out.startswith("exit_code: 3\nstdout:\nx\n")
    assert "ZeroDivisionError" in failed_text(world, "code_exec.run_python", {"code": "1/0"})


def test_run_bash_uses_our_python(world: World) -> None:
    out = call_tool(world, "code_exec.run_bash", {"command": "ls notes && python -c 'import sys; print(sys.prefix)'"})
    assert out == f"exit_code: 0\nstdout:\ndata.csv\nreadme.md\n{sys.prefix}\n\nstderr:\n"


def test_timeout_kills_an_endless_loop(world: World) -> None:
    started = time.monotonic()
    out = failed_text(world, "code_exec.run_python", {"code": "while True:\n    pass", "timeout_s": 0.5})
    assert time.monotonic() - started < 5
    assert out.startswith("exit_code: -9\n") and "timed out after 0.5 s" in out


def test_timeout_kills_background_children(world: World) -> None:
    # The background sleep keeps stdout open: without the process-group kill this call would wait 30 s.
    started = time.monotonic()
    out = failed_text(world, "code_exec.run_bash", {"command": "sleep 30 & echo started; wait", "timeout_s": 0.5})
    assert time.monotonic() - started < 5
    assert "started" in out and "timed out" in out


def test_children_do_not_outlive_a_finished_command(world: World) -> None:
    started = time.monotonic()
    out = call_tool(world, "code_exec.run_bash", {"command": "sleep 30 & echo done"})
    assert time.monotonic() - started < 5
    assert out.startswith("exit_code: 0\nstdout:\ndone\n")


def test_output_is_capped_keeping_head_and_tail(tmp_path) -> None:
    code = "import sys; sys.stdout.write('A' * 50000 + 'END')"
    result = run_limited([sys.executable, "-c", code], tmp_path, 10, {})
    assert result.stdout.startswith("A" * 100) and result.stdout.endswith("END")
    assert "[... 30003 bytes omitted ...]" in result.stdout  # 50003 - 2 * 10000 kept
    assert len(result.stdout) < MAX_OUTPUT_BYTES + 100


@pytest.mark.parametrize("timeout_s", [0, -1, 601])
def test_timeout_bounds(world: World, timeout_s: float) -> None:
    with pytest.raises(ToolError, match=r"argument 'timeout_s'"):
        call_tool(world, "code_exec.run_python", {"code": "print(1)", "timeout_s": timeout_s})


def test_huge_code_is_refused(world: World) -> None:
    with pytest.raises(ToolError, match=r"write it to a file"):
        call_tool(world, "code_exec.run_python", {"code": "#" * 200_000})
