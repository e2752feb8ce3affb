"""Private copies of a pristine world: ``fork_world`` for a one-off copy, ``WorldCopy`` for one that is put back to
pristine in place (a pooled sandbox's).

A copy is made with ``cp -a --reflink=auto`` (copy-on-write clones where the filesystem supports them: btrfs, xfs,
overlayfs on those; a plain copy elsewhere). Hard links would be unsafe: apps may write a file in place, which would
change the pristine world too. ``WorldCopy.restore`` touches only what changed, so a warm gateway on the copy keeps
running: a file whose (size, mtime, ctime, inode) still equals the one recorded after the last restore is unchanged
(ctime cannot be set by a process); any other is hashed and restored when its SHA-256 differs from the pristine
file's; files that were added are deleted and files that were deleted are copied back.

Example::

    with scratch_dir("rollout-") as scratch:
        world = World(fork_world(pristine, Path(scratch) / "ib-1"))   # deleted with the scratch folder
    copy = WorldCopy.create(Pristine.scan(pristine), owned_folder(root) / "ib-1-0")
    copy.restore()   # pristine again, in place: ResetReport(restored=..., removed=...)
    copy.delete()
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox.base import SandboxError
from envs.scratch import force_rmtree

COPY_TIMEOUT_S = 120.0
_HASH_CHUNK = 1 << 20

FileStat = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


def file_stat(path: Path) -> FileStat:
    info = path.lstat()
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def walk(root: Path) -> tuple[set[str], set[str]]:
    """The relative paths of the folders and of the other entries (files, symlinks) under ``root``."""
    folders, files = set(), set()
    for parent, dirnames, filenames in os.walk(root):
        rel = Path(parent).relative_to(root)
        folders.update((rel / name).as_posix() for name in dirnames)
        files.update((rel / name).as_posix() for name in filenames)
    # os.walk lists a symlink to a folder among dirnames without entering it: it is a file for our purposes
    links = {d for d in folders if (root / d).is_symlink()}
    return folders - links, files | links


def copy_tree(source: Path, dest: Path) -> None:
    """Copy ``source`` into the existing folder ``dest``, as copy-on-write clones where the filesystem allows."""
    try:
        subprocess.run(
            ["cp", "-a", "--reflink=auto", f"{source}/.", str(dest)],
            check=True,
            capture_output=True,
            timeout=COPY_TIMEOUT_S,
        )
    except subprocess.CalledProcessError as error:
        raise SandboxError(f"copying world {source} failed: {error.stderr.decode(errors='replace').strip()}") from None


def fork_world(pristine: Path, dest: Path) -> Path:
    """A private, writable copy of a pristine world for one rollout, at the new folder ``dest``. Callers put ``dest``
    in an ``envs.scratch.scratch_dir``: a copy a crash (SIGKILL) left behind is swept by the next process."""
    dest.mkdir(parents=True)
    copy_tree(pristine, dest)
    return dest


@dataclass(frozen=True)
class Pristine:
    """What a world looks like untouched: its folders and each file's SHA-256 (computed once per world)."""

    root: Path
    folders: frozenset[str]
    hashes: Mapping[str, str]

    @classmethod
    def scan(cls, root: Path) -> Pristine:
        if not (root / "filesystem").is_dir():
            raise SandboxError(f"{root} is not a world folder (it has no filesystem/)")
        folders, files = walk(root)
        return cls(root, frozenset(folders), {rel: sha256(root / rel) for rel in sorted(files)})


@dataclass(frozen=True)
class ResetReport:
    restored: int
    """Files changed in place or deleted, copied back from the pristine world."""
    removed: int
    """Files and folders that were added, deleted."""


class WorldCopy:
    """A private copy of a pristine world that can be put back to pristine in place."""

    def __init__(self, pristine: Pristine, root: Path) -> None:
        self.pristine, self.root = pristine, root
        self._clean: dict[str, FileStat] = {}

    @classmethod
    def create(cls, pristine: Pristine, root: Path) -> WorldCopy:
        copy = cls(pristine, fork_world(pristine.root, root))
        copy._clean = {rel: file_stat(root / rel) for rel in pristine.hashes}
        return copy

    def restore(self) -> ResetReport:
        folders, files = walk(self.root)
        removed = 0
        for rel in sorted(files - self.pristine.hashes.keys()):
            (self.root / rel).unlink(missing_ok=True)
            removed += 1
        for rel in sorted(folders - self.pristine.folders, reverse=True):  # deepest first
            if (self.root / rel).is_dir():
                shutil.rmtree(self.root / rel)
                removed += 1
        restored = 0
        for rel, digest in self.pristine.hashes.items():
            target = self.root / rel
            if target.is_dir() and not target.is_symlink():  # a folder where the world has a file
                shutil.rmtree(target)
            if rel in files and self._clean.get(rel) == file_stat(target):
                continue
            if rel in files and target.is_file() and not target.is_symlink() and sha256(target) == digest:
                self._clean[rel] = file_stat(target)  # touched but identical
                continue
            self._copy_back(rel)
            restored += 1
        for rel in self.pristine.folders:
            (self.root / rel).mkdir(parents=True, exist_ok=True)
        return ResetReport(restored, removed)

    def _copy_back(self, rel: str) -> None:
        """Atomically replace ``rel`` by the pristine file (data, mode and mtime)."""
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".restore")
        os.close(fd)
        try:
            shutil.copy2(self.pristine.root / rel, tmp)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._clean[rel] = file_stat(target)

    def delete(self) -> None:
        """Delete the copy, and the process's scratch folder holding it once that is empty."""
        force_rmtree(self.root)
        with contextlib.suppress(OSError):  # not empty: other sandboxes of this process still live there
            self.root.parent.rmdir()
