"""A full disk, named as one: ``no_space(error)`` finds the ``ENOSPC`` (or quota) under whatever wraps it.

A disk that fills up mid-stage surfaced as something else: an ``ExceptionGroup`` from a task group, or — where a
stage treats one unit's failure as a finding (an ablation arm) — as an empty result that a later check refused
("suite 'eval_results' failed on 0 rows"). The ``OSError`` is still there, in a cause, a context or a group member;
``no_space`` digs it out and ``NoSpaceLeft`` says it plainly, with the device and the path.

    try:
        write_checkpoint()
    except Exception as error:
        if (full := no_space(error)) is not None:
            raise NoSpaceLeft.of(full) from error
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from envs.errors import RecipeError

FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class NoSpaceLeft(RecipeError, OSError):
    """The disk (or the user's quota) is full; the message names the device and the path."""

    def __str__(self) -> str:  # the message alone: it goes on one line after "recipe: error:"
        return str(self.strerror)

    @classmethod
    def of(cls, error: OSError, near: Path | None = None) -> NoSpaceLeft:
        """``error`` named plainly; ``near``: a folder the work wrote to, named when the error carries no path (a
        buffered write's does not)."""
        path = error.filename if isinstance(error.filename, str | os.PathLike) else None
        if path is not None:
            where = f"{device_of(Path(path))} ({path})"
        elif near is not None:
            where = f"{device_of(near)} (writing under {near}; the failed write named no file)"
        else:
            where = "DEVICE (the failed write named no file)"
        what = "disk quota exceeded on" if error.errno == errno.EDQUOT else "no space left on"
        return cls(error.errno or errno.ENOSPC, f"{what} {where}: free space there, then resume the run")


def no_space(error: BaseException | None, _seen: frozenset[int] = frozenset()) -> OSError | None:
    """The first full-disk ``OSError`` in ``error``, its causes, contexts and group members; None when there is none."""
    if error is None or id(error) in _seen:
        return None
    seen = _seen | {id(error)}
    if isinstance(error, OSError) and error.errno in FULL:
        return error
    for inner in getattr(error, "exceptions", ()):  # ExceptionGroup
        if (found := no_space(inner, seen)) is not None:
            return found
    return no_space(error.__cause__, seen) or no_space(error.__context__, seen)


def device_of(path: Path) -> str:
    """The device (as ``/proc/mounts`` names it) holding ``path``, or its nearest existing folder; "DEVICE" when
    unknown."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        wanted = probe.stat().st_dev
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount_point = line.split()[:2]
            if os.path.isdir(mount_point) and os.stat(mount_point).st_dev == wanted:
                return device
    except OSError:
        pass
    return "DEVICE"
