"""Atomic file writes and safe reads of files a model may have made.

* Writes: a temp file in the target's folder, fsynced, then ``os.replace`` — a reader (or a crash) never sees half a
  file. Every write that matters in the project goes through here.
* Folders (a checkpoint, a policy, staged weights, the environment): filled in a hidden sibling and swapped in whole
  by ``replace_dir`` (``staged_dir`` makes the sibling and swaps it in when its block ends), so a reader (or a
  crash) never sees half a folder; ``fsync_tree`` makes what a library wrote there durable before the rename.
* Reads: ``open_regular`` opens a file without blocking and refuses anything but a regular file. Model-run code can
  leave a FIFO (``mkfifo``) where a file is expected: a plain ``open`` of it blocks until someone writes, which hung
  the file tools' threads and the grader.
* Shared builds (an environment, a base model): built by one process at a time under ``file_lock``, and written only
  into folders the project made (``claim_folder``: a marker file inside), never into a user's folder. A folder a
  command replaces whole (an explorer export, a comparison) must be new, empty, or its own (``check_replaceable``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from envs.errors import RecipeError

_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
}


class SpecialFileError(OSError):
    """A path that is no regular file (a FIFO, socket, device or folder): reading it could block or never end."""


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words: "a regular file", "a FIFO (named pipe)", "a socket", ..."""
    return "a regular file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "a special file")


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for binary reading, or ``SpecialFileError`` when it is not a regular file.

    The open itself never blocks (``O_NONBLOCK``: a FIFO without a writer opens at once) and the type is checked on
    the open descriptor, so a file swapped for a FIFO after a ``stat`` is still refused.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SpecialFileError(errno.EINVAL, f"not a regular file but {file_kind(mode)}", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (the first ``max_bytes`` of them when given); see ``open_regular``."""
    with open_regular(path) as handle:
        return handle.read() if max_bytes is None else handle.read(max_bytes)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (and ``root`` itself): what a library wrote there is on disk before
    the folder is renamed into place, so a crash never leaves a complete-looking folder of empty files."""
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(Path(folder))


def fsync_dir(folder: Path) -> None:
    """fsync a folder: its entries (a rename into it, a new file) survive a crash."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(staged: Path, target: Path) -> None:
    """Swap the finished folder ``staged`` in as ``target`` (a sibling of it), replacing any folder there.

    Steps: fsync ``staged`` (every file and folder); rename an old ``target`` aside to ``.<name>.old``; rename
    ``staged`` to ``target``; fsync the parent folder (the renames survive a crash); remove the old folder. A reader,
    or a crash at any point, never sees a half-written ``target`` or one of empty files: ``target`` is the old folder
    or the new one, whole — or, after a crash between the two renames, absent, with the old one whole beside it as
    ``.<name>.old`` (cleared by the next swap). Both must be on one file system (a sibling is).
    """
    fsync_tree(staged)
    backup = target.with_name(f".{target.name}.old")
    shutil.rmtree(backup, ignore_errors=True)
    if target.exists():
        os.replace(target, backup)
    os.replace(staged, target)
    fsync_dir(target.parent)
    shutil.rmtree(backup, ignore_errors=True)


@contextmanager
def staged_dir(target: Path) -> Iterator[Path]:
    """A fresh hidden sibling folder of ``target`` (``.<name>-XXXX``) to fill; when the block ends normally it replaces
    ``target`` (``replace_dir``), and on an exception it is removed and ``target`` is left as it was.

        with staged_dir(checkpoint) as tmp:
            torch.save(state, tmp / "state.pt")
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        yield tmp
        replace_dir(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tree_digest(root: Path, files: Iterable[Path]) -> str:
    """sha256 over each file's path relative to ``root`` and the sha256 of its bytes, in path order: equal digests,
    equal trees (what a content-addressed build is keyed or checked by)."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in its folder and ``os.replace``: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


class LockTimeout(TimeoutError):
    """Another process held the lock longer than the caller would wait."""


@contextmanager
def file_lock(path: Path, timeout_s: float | None = None) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (created if missing) held for the block: of the processes building the
    same thing, one builds and the others wait, then find it built. ``timeout_s`` None waits as long as it takes. The
    kernel releases the lock when its holder dies, so a killed builder never blocks the next one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with path.open("a") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() > deadline:
                    raise LockTimeout(f"{path} stayed locked for {timeout_s:g} s (another build?)") from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ForeignFolderError(RecipeError, OSError):
    """A folder the project would write into holds someone else's files (or is not a folder)."""


def claim_folder(folder: Path, marker: str, ours: bool = False) -> Path:
    """Make ``folder`` one the project may write into: create it (with ``marker`` inside) when missing or empty, accept
    it when it holds ``marker`` (or the caller recognised it as its own: ``ours``), and refuse anything else — a user's
    non-empty folder is never written into, let alone replaced."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise ForeignFolderError(f"{folder} is not a folder")
    if folder.is_dir() and not (folder / marker).is_file() and any(folder.iterdir()) and not ours:
        raise ForeignFolderError(
            f"{folder} holds files rl-recipe did not write (no {marker} in it): choose an empty or new folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / marker).touch()
    return folder


def check_replaceable(folder: Path, marker: str, owned: re.Pattern[str], what: str) -> None:
    """Refuse ``folder`` as the target of ``replace_dir`` unless replacing it loses nothing: absent, empty, or made by
    the same writer earlier — ``marker`` in it, only files whose path (relative to it) ``owned`` matches, and no
    symbolic link, which a replace could follow out. ``what`` names the writer in the message ("an export")."""
    if folder.is_symlink():
        raise ForeignFolderError(f"{folder} is a symbolic link: pass a folder path of its own")
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ForeignFolderError(f"{folder} is a file, not a folder: pass a new or empty folder for {what}")
    if not any(folder.iterdir()):
        return
    if (folder / marker).is_symlink() or not (folder / marker).is_file():
        raise ForeignFolderError(
            f"{folder} is a folder with files and no {marker} (which {what} writes): it writes only into a new or "
            f"empty folder, or one {what} made"
        )
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent) / name
            if path.is_symlink():
                raise ForeignFolderError(f"{path} is a symbolic link, which {what} never makes: remove it first")
            if name in files and not owned.fullmatch(path.relative_to(folder).as_posix()):
                raise ForeignFolderError(f"{path} was not written by {what}: move it out of {folder} first")
