"""Scratch folders owned by one process, and the sweep that removes those of dead owners.

World copies (pooled sandboxes, forked worlds, terminal sandboxes) and code_exec's HOME live under
``<root>/<owner>/``, where ``<owner>`` is ``<pid>-<start>``: the process id and its start time in clock ticks since
boot (``/proc/<pid>/stat``, field 22), so a pid the kernel reused is never taken for the dead owner. A process killed
with SIGKILL cleans nothing up; ``sweep_stale(root)`` removes the folders of every owner that is gone, after killing any
process still running in them. It runs the first time a process takes scratch under a root (``owned_folder``: a sandbox
pool's first copy, a ``scratch_dir``).

Example::

    with scratch_dir("rollout-") as scratch:         # <tmp>/rl-recipe-scratch/<pid>-<start>/rollout-XXXX/
        copy = fork_world(pristine, scratch / "ib-1")
    sweep_stale()                                    # the folders of owners that died (SIGKILL) are gone
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

SCRATCH_ROOT = Path(tempfile.gettempdir()) / "rl-recipe-scratch"
_OWNER = re.compile(r"^(\d+)-(\d+)$")
_PROC = Path("/proc")

log = logging.getLogger(__name__)


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None when it does not exist (or /proc is unavailable)."""
    try:
        stat_line = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(stat_line.rpartition(")")[2].split()[19])  # field 22; the name in parentheses may hold spaces


def owner_tag(pid: int | None = None) -> str:
    """``<pid>-<start ticks>`` of ``pid`` (default: this process); ``<pid>-0`` where /proc is unavailable."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_ticks(pid) or 0}"


def owner_alive(tag: str) -> bool:
    """Whether the process named by ``tag`` still runs: same pid and same start time (a reused pid is another one)."""
    match = _OWNER.match(tag)
    if match is None:
        return True  # not ours to judge
    pid, start = int(match[1]), int(match[2])
    if start == 0 or not _PROC.is_dir():  # no start time recorded: the pid alone decides
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _start_ticks(pid) == start


def processes_of(root: Path, proc: Path = _PROC) -> list[int]:
    """The pids of processes that belong to the folder ``root``: ``root`` (or a path inside it) is one of their
    arguments (a gateway's ``--world``), or their working folder is inside it (code_exec children, which run in their
    own sessions). Used for the last-resort kill, when no asyncio loop is left to close a client."""
    needle = os.fsencode(root)
    pids = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            cwd = os.fsencode(os.readlink(entry / "cwd"))
        except OSError:  # exited, or not ours to inspect
            continue
        inside = [arg for arg in (*argv, cwd) if arg == needle or arg.startswith(needle + b"/")]
        if inside:
            pids.append(int(entry.name))
    return pids


def kill_processes(pids: list[int], wait_s: float = 5.0) -> None:
    """SIGKILL each pid and its process group (never our own group), then wait up to ``wait_s`` for them to be gone:
    a SIGKILLed process runs until the kernel next schedules it, and one still alive while its folder is deleted
    can write into it again (on a loaded machine that window was long enough to fail a sweep)."""
    own = os.getpgrp()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own:
                os.killpg(group, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while any(process_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)


def process_running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting for its parent to reap it has stopped running)."""
    try:
        state = (_PROC / str(pid) / "stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def force_rmtree(path: Path) -> None:
    """Delete ``path`` even where code left read-only folders behind."""
    shutil.rmtree(path, onerror=_force_remove)


def _force_remove(_function: object, path: str, _exc_info: object) -> None:
    """``rmtree``'s error handler: make the parent writable and retry."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=_force_remove)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def sweep_stale(root: Path = SCRATCH_ROOT) -> list[Path]:
    """Remove the owner folders under ``root`` whose owner process is dead (killing what still runs in them); returns
    the folders removed. Folders of live owners, and anything not named like an owner, are left alone."""
    swept: list[Path] = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        if not folder.is_dir() or folder.is_symlink() or not _OWNER.match(folder.name) or owner_alive(folder.name):
            continue
        kill_processes(processes_of(folder))
        try:
            force_rmtree(folder)
        except OSError as error:  # another process sweeping at the same time, a busy mount: try again next time
            log.warning("could not sweep the stale scratch folder %s: %s", folder, error)
            continue
        swept.append(folder)
    if swept:
        log.info("swept %d scratch folder(s) left under %s by processes that died: %s", len(swept), root,
                    ", ".join(folder.name for folder in swept))  # fmt: skip
    return swept


def owned_folder(root: Path = SCRATCH_ROOT) -> Path:
    """This process's folder under ``root``, created; the first call for ``root`` sweeps the dead owners' folders."""
    _sweep_once(root, os.getpid())
    folder = root / owner_tag()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@functools.cache
def _sweep_once(root: Path, pid: int) -> None:
    """``sweep_stale(root)`` once per process (the pid keys the cache: a forked child sweeps on its own)."""
    sweep_stale(root)


@contextlib.contextmanager
def scratch_dir(prefix: str, root: Path = SCRATCH_ROOT) -> Iterator[Path]:
    """A fresh folder in this process's scratch under ``root``, deleted on exit (like ``TemporaryDirectory``, but a
    crash leaves it where the next process's sweep finds it)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=owned_folder(root)))
    try:
        yield folder
    finally:
        with contextlib.suppress(OSError):
            force_rmtree(folder)
