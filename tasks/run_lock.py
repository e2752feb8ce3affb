"""One process at a time works on a run folder: ``claim`` before writing into it, ``release`` after.

Two ``recipe run --resume RUN`` at once both ran the same stage into the same folders and interleaved their catalog
writes. Now the pipeline flow and every stage flow hold the run's lock (``RUN/.run.lock``, an ``flock``) while they
work; a second process is refused at once, in one line naming the holder. The kernel drops an ``flock`` when its
process dies, however it dies, so a lock left by a killed run is simply free: the next claim takes it, safely, with no
staleness to guess. A process may claim a run it holds again (the pipeline's stage flows run inside it).

    claim(store.root, "recipe run")      # RunBusyError: run R is being run by pid 4242 since ... (recipe run)
    try:
        ...
    finally:
        release(store.root)
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from envs.errors import RecipeError

LOCK_FILE = ".run.lock"
_HELD: dict[Path, list[int]] = {}
"""Runs this process holds: resolved folder → [descriptor, depth]."""


class RunBusyError(RecipeError, RuntimeError):
    """Another live process works on the run; the message names it."""


def claim(root: Path, what: str) -> None:
    """Hold ``root``'s lock for this process (``what`` says what it runs, for the refusal another process gets)."""
    key = root.resolve()
    if key in _HELD:
        _HELD[key][1] += 1
        return
    fd = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise RunBusyError(
            f"run {root.name} is being run by {holder}; wait for it to end, or stop it (a killed run's lock is "
            "free again at once)"
        ) from None
    since = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} since {since} ({what})\n".encode(), 0)
    _HELD[key] = [fd, 1]


def release(root: Path) -> None:
    """Give up one claim of ``root``; the lock goes with the last."""
    key = root.resolve()
    held = _HELD.get(key)
    if held is None:
        return
    held[1] -= 1
    if held[1] == 0:
        del _HELD[key]
        os.close(held[0])  # drops the flock; the file stays (its content is only ever read under a failed claim)


@contextmanager
def holding(root: Path, what: str) -> Iterator[None]:
    claim(root, what)
    try:
        yield
    finally:
        release(root)
