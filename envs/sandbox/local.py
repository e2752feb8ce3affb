"""The local provider: a private copy of the world in a scratch folder and a stdio gateway process on it.

The copy is made with ``cp -a --reflink=auto`` (copy-on-write clones where the filesystem supports them: btrfs, xfs,
overlayfs on those; a plain copy elsewhere). Hard links would be unsafe: apps may write a file in place, which would
change the pristine world too. ``reset`` restores the copy in place, touching only what changed, so the warm gateway
keeps running: a file whose (size, mtime, ctime, inode) still equals the one recorded after the last restore is
unchanged (ctime cannot be set by a process); any other is hashed and restored when its SHA-256 differs from the
pristine file's; files that were added are deleted and files that were deleted are copied back.

Example::

    provider = LocalProvider({"ib-1": Path("data/worlds/ib-1")}, limits=ResourceLimits(cpu_s=30))
    sandbox = await provider.start("ib-1")
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envs.mcp.client import GatewayClient, Transport, gateway_command
from envs.mcp.variants import BadVariant
from envs.sandbox.base import REAPER, ProviderName, Sandbox, SandboxError, SandboxProvider, SandboxTimeouts, register
from envs.sandbox.limits import ResourceLimits
from envs.scratch import force_rmtree, kill_processes, owned_folder, processes_of

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
    """Copy ``source`` to the new folder ``dest``, as copy-on-write clones where the filesystem allows."""
    try:
        subprocess.run(
            ["cp", "-a", "--reflink=auto", f"{source}/.", str(dest)],
            check=True,
            capture_output=True,
            timeout=COPY_TIMEOUT_S,
        )
    except subprocess.CalledProcessError as error:
        raise SandboxError(f"copying world {source} failed: {error.stderr.decode(errors='replace').strip()}") from None


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
        root.mkdir(parents=True)
        copy_tree(pristine.root, root)
        copy = cls(pristine, root)
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


def open_gateway(command: list[str], env: dict[str, str], cwd: Path | None, timeouts: SandboxTimeouts) -> GatewayClient:
    """A client for the stdio gateway launched by ``command`` (in ``cwd``, with ``env`` added to its environment):
    the one place that says how a sandbox's gateway is started; ``gateway_command`` gives the command itself."""
    return GatewayClient.for_command(
        command, env=env, cwd=cwd, call_timeout_s=timeouts.call_s, start_timeout_s=timeouts.start_s
    )


# --- the provider -----------------------------------------------------------------------------------------------------


class LocalSandbox(Sandbox):
    def __init__(self, world_id: str, copy: WorldCopy, timeouts: SandboxTimeouts) -> None:
        super().__init__(world_id, copy.root, timeouts)
        self.copy = copy
        self.last_reset: ResetReport | None = None

    async def reset(self) -> None:
        try:
            self.last_reset = await asyncio.wait_for(asyncio.to_thread(self.copy.restore), self.timeouts.reset_s)
        except TimeoutError as error:
            raise SandboxError(f"resetting {self.world_root} took over {self.timeouts.reset_s:g} s") from error

    async def close(self) -> None:
        try:
            await self.close_client()
        finally:
            REAPER.untrack(self)
            await asyncio.to_thread(self.kill)

    def kill(self) -> None:
        kill_processes(processes_of(self.world_root))
        if self.world_root.exists():
            self.copy.delete()


@register(ProviderName.LOCAL)
class LocalProvider(SandboxProvider):
    """Sandboxes as world copies under ``scratch`` (default: ``rl-recipe-sandboxes`` in the system temp folder) with a
    stdio gateway each. The copies live in this process's own folder there (``envs.scratch``), so the copies of a
    process that died (SIGKILL) are found and deleted by the next process that makes a copy there."""

    def __init__(
        self,
        world_root_by_id: Mapping[str, Path],
        timeouts: SandboxTimeouts | None = None,
        limits: ResourceLimits | None = None,
        scratch: Path | None = None,
        apps: Sequence[str] | None = None,
        variants: frozenset[BadVariant] = frozenset(),
    ) -> None:
        super().__init__(world_root_by_id, timeouts, apps, variants)
        self.limits = limits or ResourceLimits.from_env()
        self.scratch = scratch or Path(tempfile.gettempdir()) / "rl-recipe-sandboxes"
        self._pristine: dict[str, Pristine] = {}

    def pristine_of(self, world_id: str) -> Pristine:
        if world_id not in self._pristine:
            self._pristine[world_id] = Pristine.scan(self.pristine(world_id).resolve())
        return self._pristine[world_id]

    def new_copy(self, world_id: str) -> WorldCopy:
        root = (owned_folder(self.scratch) / f"{world_id}-{uuid.uuid4().hex[:12]}").resolve()
        return WorldCopy.create(self.pristine_of(world_id), root)

    async def start(self, world_id: str) -> LocalSandbox:
        copy = await asyncio.wait_for(asyncio.to_thread(self.new_copy, world_id), self.timeouts.start_s)
        sandbox = LocalSandbox(world_id, copy, self.timeouts)
        REAPER.track(sandbox)
        try:
            command = gateway_command(copy.root, Transport.STDIO, apps=self.apps, variants=self.variants)
            await sandbox.open_client(open_gateway(command, self.limits.to_env(), copy.root, self.timeouts))
        except BaseException:
            await sandbox.close()
            raise
        return sandbox
