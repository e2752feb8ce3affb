"""A command that never outlives the process that asked for it: ``python -m trainer.vllm.guard PARENT PIDFILE -- CMD``.

An engine server is started by a longer-lived owner (a Ray actor, a stage's process). If that owner is killed with
SIGKILL it runs no clean-up, and a vLLM server (an API process, an engine-core process and its workers, none of which
notice their parent's death) would be left holding its port, memory and a busy-polling core.

The guard is the server's keeper, detached from the owner: the launcher forks it into a session of its own, writes its
pid to ``PIDFILE`` and exits. Detached matters: Ray SIGKILLs the direct children of a worker that exits, and a keeper
killed with its owner could clean nothing up. The guard runs ``CMD`` in its process group and watches ``PARENT``
(pid and start time, so a reused pid is not mistaken for it, every ``POLL_S``); when the owner is gone, when the guard
is told to stop (SIGTERM / SIGINT), or when the command exits, the whole group gets SIGTERM, then SIGKILL after
``STOP_GRACE_S`` — the guard included, so no part of the server survives it. The owner stops everything at once with
``os.killpg(guard_pid, ...)``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_S = 0.5
STOP_GRACE_S = 20.0


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, ``/proc/PID/stat`` field 22); None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def guard(parent: int, started: str | None, command: list[str]) -> int:
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    child = subprocess.Popen(command)
    while child.poll() is None and not stopping and start_time(parent) == started:
        time.sleep(POLL_S)
    code = child.poll()
    os.killpg(0, signal.SIGTERM)  # the guard's own handler only notes it
    deadline = time.monotonic() + STOP_GRACE_S
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    sys.stdout.flush()
    os.killpg(0, signal.SIGKILL)  # whatever is left of the group (vLLM's engine core), and the guard itself
    return code if code is not None else 1


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or not argv[0].isdigit():
        print("usage: python -m trainer.vllm.guard PARENT_PID PIDFILE -- COMMAND ...", file=sys.stderr)
        return 2
    parent, pidfile, command = int(argv[0]), Path(argv[1]), argv[3:]
    started = start_time(parent)
    pid = os.fork()
    if pid > 0:  # the launcher: hand the guard's pid to the owner, then leave (the guard is nobody's child now)
        tmp = pidfile.with_name(f".{pidfile.name}.tmp")
        tmp.write_text(str(pid))
        os.replace(tmp, pidfile)
        return 0
    os.setsid()  # a session and process group of its own: the guard's clean-up signals this group, never another
    os._exit(guard(parent, started, command))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
