"""A command that never outlives the process that asked for it: ``python -m trainer.vllm.guard PARENT -- CMD``.

An engine server is started by a longer-lived owner (a Ray actor, a stage's process). If that owner is killed with
SIGKILL it runs no clean-up, and a vLLM server (an API process and its engine-core process) would be left holding its
port and memory. The guard sits between the two, as the leader of the process group the owner started it in
(``start_new_session``): the command runs in that group; when ``PARENT`` is gone (checked every ``POLL_S``), when the
guard is told to stop (SIGTERM / SIGINT), or when the command exits, the whole group gets SIGTERM, then SIGKILL after
``STOP_GRACE_S`` — the guard included, so no part of the server survives it. The owner, for its part, can stop
everything at once with ``os.killpg(guard_pid, ...)``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5
STOP_GRACE_S = 20.0


def guard(parent: int, command: list[str]) -> int:
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # lead a group of our own: the clean-up below signals this group, never the caller's
    child = subprocess.Popen(command)
    while child.poll() is None and not stopping and os.getppid() == parent:
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
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m trainer.vllm.guard PARENT_PID -- COMMAND ...", file=sys.stderr)
        return 2
    return guard(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
