"""A process that dies with its owner, however the owner dies: ``python -m tasks.tether OWNER TARGET``.

Prefect starts a run's temporary server as a child and stops it at exit — which a SIGKILL (or an OOM kill) skips: the
server then ran on forever, holding ~200 MB and a loopback port. ``tether(pid)`` starts a small watcher in a session of
its own (so the signal that kills the owner's group spares it): every ``POLL_S`` it checks that the owner still runs
(its pid with the same start time, ``envs.scratch.owner_alive``), and when it does not, SIGTERMs the target, then
SIGKILLs it after ``GRACE_S``. It exits when either is gone.

    server = SubprocessASGIServer(); server.start()
    tether(server.server_process.pid)          # the server ends with this process
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

from envs.scratch import owner_alive, owner_tag

POLL_S = 1.0
GRACE_S = 10.0


def tether(target: int, owner: int | None = None) -> None:
    """End ``target`` when ``owner`` (default: this process) is gone."""
    argv = [sys.executable, "-m", "tasks.tether", owner_tag(owner), owner_tag(target)]
    subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _signal(tag: str, signum: int) -> None:
    if owner_alive(tag):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(tag.split("-")[0]), signum)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tasks.tether OWNER_TAG TARGET_TAG", file=sys.stderr)
        return 2
    owner, target = argv
    while owner_alive(owner) and owner_alive(target):
        time.sleep(POLL_S)
    if owner_alive(target):
        _signal(target, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        while owner_alive(target) and time.monotonic() < deadline:
            time.sleep(0.2)
        _signal(target, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
