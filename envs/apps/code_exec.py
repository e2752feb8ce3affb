"""code_exec: run Python or bash in the world's ``filesystem/`` with a wall-clock limit.

Every launch goes through ``run_limited``: the one place that starts a subprocess, so resource limits, sandboxing
(bubblewrap) and a minimal environment (``exec_env``: none of the trainer's secrets) are added there once for every
caller.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, BinaryIO

from pydantic import Field

from envs.apps.base import ToolError, World, tool
from envs.sandbox.limits import Mount, ResourceLimits, isolate, preexec
from envs.scratch import scratch_dir

APP = "code_exec"
MAX_OUTPUT_BYTES = 20_000  # per stream: the first and the last 10 000 bytes are kept
MAX_CODE_CHARS = 100_000  # below the kernel's 128 KiB limit on one argv string
MAX_TIMEOUT_S = 600.0
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
DRAIN_TIMEOUT_S = 2.0  # how long to wait for output pipes held open by a process that left our group
_POLL_S = 0.01

Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)]


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    wall_s: float  # the wall-clock limit applied: the requested timeout, capped by the sandbox's limits

    def render(self, timeout_s: float) -> str:
        stderr = self.stderr
        if self.timed_out:
            stderr += f"\n[timed out after {min(timeout_s, self.wall_s):g} s: the process and its children were killed]"
        return f"exit_code: {self.exit_code}\nstdout:\n{self.stdout}\nstderr:\n{stderr}"

    def answer(self, timeout_s: float) -> str:
        """The rendered result; a program that failed (non-zero exit or timeout) comes back as a tool error with the
        same text, so per-tool failure rates count it (a missing package shows as ``ModuleNotFoundError``)."""
        text = self.render(timeout_s)
        if self.exit_code != 0 or self.timed_out:
            raise ToolError(text)
        return text


class _CappedReader(threading.Thread):
    """Drains a pipe in the background, keeping its first and last ``limit / 2`` bytes (a chatty process cannot
    exhaust memory, and both the start of the output and the final traceback survive)."""

    def __init__(self, pipe: BinaryIO, limit: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.half = pipe, limit // 2
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def run(self) -> None:
        while chunk := os.read(self.pipe.fileno(), 65536):
            self.total += len(chunk)
            room = self.half - len(self.head)
            self.head += chunk[:room] if room > 0 else b""
            self.tail += chunk[max(room, 0) :]
            del self.tail[: -self.half]
        self.pipe.close()

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {omitted} bytes omitted ...]\n".encode() if omitted else b""
        return (bytes(self.head) + middle + bytes(self.tail)).decode("utf-8", errors="replace")


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group may be gone already
        os.killpg(pgid, signal.SIGKILL)


def _exited(pid: int) -> bool:
    """True once ``pid`` has exited, without reaping it: the zombie keeps its process-group id reserved."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def run_limited(
    argv: Sequence[str],
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    limits: ResourceLimits | None = None,
    mounts: Sequence[Mount] = (),
) -> ExecResult:
    """Run ``argv`` in ``cwd`` in a new session under ``limits``; after ``timeout_s`` seconds (capped at
    ``limits.wall_s``) of wall-clock time kill its process group.

    ``limits`` defaults to ``ResourceLimits.from_env()``, the limits the sandbox gave this process: rlimits are set in
    the child, and under bubblewrap (when usable) ``cwd`` and the launch's scratch folder are the only writable host
    folders and there is no network (see ``envs.sandbox.limits``). The process sees only ``exec_env`` (HOME and TMPDIR
    in that scratch folder, removed afterwards), ``limits.to_env()`` (code it launches stays under them) and ``env``
    on top: nothing of this process's environment (judge keys, tokens) leaks in. The group is killed in every case
    once the main process is done, so background children cannot outlive the call (or hold the output pipes open).
    Output is capped at ``MAX_OUTPUT_BYTES`` per stream. ``mounts`` (host folders at other paths inside, a Harbor
    task's ``/app``) need bubblewrap: without it the launch raises ``RuntimeError``.
    """
    limits = limits or ResourceLimits.from_env()
    wall_s = min(timeout_s, limits.wall_s)
    with scratch_dir("exec-") as scratch:
        started = time.monotonic()
        process = subprocess.Popen(
            isolate(argv, cwd, [cwd, Path(scratch)], limits.isolation, mounts),
            cwd=cwd,
            env=exec_env(Path(scratch)) | limits.to_env() | dict(env or {}),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=preexec(limits),
        )
        assert process.stdout is not None and process.stderr is not None
        readers = [_CappedReader(process.stdout, MAX_OUTPUT_BYTES), _CappedReader(process.stderr, MAX_OUTPUT_BYTES)]
        for reader in readers:
            reader.start()
        deadline = started + wall_s
        while not _exited(process.pid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        timed_out = not _exited(process.pid)
        _kill_group(process.pid)  # the session id is the main process's pid, still reserved by it (not reaped yet)
        exit_code = process.wait()
        for reader in readers:
            reader.join(DRAIN_TIMEOUT_S)
    stdout, stderr = (reader.text() for reader in readers)
    return ExecResult(exit_code, stdout, stderr, timed_out, time.monotonic() - started, wall_s)


def exec_env(scratch: Path) -> dict[str, str]:
    """The environment model-run code starts from, built from nothing: this interpreter's folder first on PATH (so
    ``python`` has our packages), HOME and TMPDIR in the launch's ``scratch`` folder, a UTF-8 locale."""
    return {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), SYSTEM_PATH]),
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
    }


def _cwd(world: World) -> Path:
    if not world.fs_root.is_dir():
        raise ToolError("this world has no filesystem/ folder to run code in")
    return world.fs_root


def _check_size(source: str, what: str) -> None:
    if len(source) > MAX_CODE_CHARS:
        raise ToolError(
            f"the {what} is {len(source)} characters (limit {MAX_CODE_CHARS}); write it to a file with "
            "filesystem.write_file and run that file instead"
        )


@tool(APP)
def run_python(world: World, code: str, timeout_s: Timeout = 30) -> str:
    """Run a Python program with the environment's interpreter (pandas, openpyxl, pdfplumber, ... are installed).

    Args:
        code: the Python source to run (as with python -c). The working directory is the filesystem root, so
            relative paths like "models/x.xlsx" work; print what you want to see.
        timeout_s: wall-clock limit in seconds (default 30, at most 600); on timeout the process and its children
            are killed.

    Returns "exit_code: N", then "stdout:" and "stderr:" sections (each cut to its first and last 10 000 bytes); a
    non-zero exit code or a timeout is reported as an error with the same text.
    """
    _check_size(code, "code")
    return run_limited([sys.executable, "-c", code], _cwd(world), timeout_s).answer(timeout_s)


@tool(APP)
def run_bash(world: World, command: str, timeout_s: Timeout = 30) -> str:
    """Run a bash command line (as with bash -c); `python` on PATH is the environment's interpreter.

    Args:
        command: the command line. The working directory is the filesystem root.
        timeout_s: wall-clock limit in seconds (default 30, at most 600); on timeout the process and its children
            are killed.

    Returns "exit_code: N", then "stdout:" and "stderr:" sections (each cut to its first and last 10 000 bytes); a
    non-zero exit code or a timeout is reported as an error with the same text.
    """
    _check_size(command, "command")
    bash = shutil.which("bash") or "/bin/bash"
    return run_limited([bash, "-c", command], _cwd(world), timeout_s).answer(timeout_s)
