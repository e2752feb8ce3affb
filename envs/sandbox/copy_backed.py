"""What the ``local`` and ``docker`` providers share: a sandbox whose world is a private ``WorldCopy`` on this host.

The copies live in this process's own folder under ``SandboxOptions.scratch`` (``envs.scratch.owned_folder``), so the
copies of a process that died (SIGKILL) are found and deleted by the next process that makes a copy there. ``reset``
restores the copy in place and the gateway keeps running; ``close`` and ``kill`` stop the sandbox's processes (how is
the provider's: ``stop_processes``) and delete the copy. Every sandbox is known to the process-wide ``REAPER`` from
before its gateway starts until it is closed.
"""

from __future__ import annotations

import asyncio
import uuid
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from envs.faults import FaultKind
from envs.sandbox.base import Sandbox, SandboxError, SandboxOptions, SandboxProvider, SandboxTimeouts
from envs.sandbox.reaper import REAPER
from envs.sandbox.world_copy import Pristine, ResetReport, WorldCopy
from envs.scratch import owned_folder


class CopySandbox(Sandbox):
    """A sandbox on ``copy``; ``last_reset`` says what the last reset restored."""

    def __init__(self, world_id: str, copy: WorldCopy, timeouts: SandboxTimeouts) -> None:
        super().__init__(world_id, copy.root, timeouts)
        self.copy = copy
        self.last_reset: ResetReport | None = None

    async def launch(self, command: list[str], env: dict[str, str], cwd: Path | None) -> Self:
        """Start the gateway ``command`` (``Sandbox.open_gateway``) with the reaper watching; a sandbox whose gateway
        does not start is closed, its copy deleted."""
        REAPER.track(self)
        try:
            await self.open_gateway(command, env, cwd)
        except BaseException:
            await self.close()
            raise
        return self

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
            # Unbounded: a local kill is SIGKILL and a deletion; docker's goes through its SDK client's own timeout.
            await asyncio.to_thread(self.kill)

    def kill(self) -> None:
        self.stop_processes()
        if self.world_root.exists():
            self.copy.delete()

    @abstractmethod
    def stop_processes(self) -> None:
        """Kill every process of the sandbox (its gateway and what it started), synchronously."""


class CopyProvider(SandboxProvider):
    """A provider whose sandboxes are ``CopySandbox``es; it scans each pristine world once."""

    def __init__(self, world_root_by_id: Mapping[str, Path], options: SandboxOptions | None = None) -> None:
        super().__init__(world_root_by_id, options)
        self._pristine: dict[str, Pristine] = {}
        self._faults = self.options.faults.injector("sandbox") if self.options.faults else None

    def pristine_of(self, world_id: str) -> Pristine:
        if world_id not in self._pristine:
            self._pristine[world_id] = Pristine.scan(self.pristine(world_id).resolve())
        return self._pristine[world_id]

    def new_copy(self, world_id: str) -> WorldCopy:
        root = (owned_folder(self.options.scratch) / f"{world_id}-{uuid.uuid4().hex[:12]}").resolve()
        return WorldCopy.create(self.pristine_of(world_id), root)

    async def copy_world(self, world_id: str) -> WorldCopy:
        """``new_copy`` off the event loop, within ``timeouts.start_s``; the first step of every start, so where an
        injected ``sandbox_start`` fault fails it."""
        if self._faults is not None and self._faults.fires(FaultKind.SANDBOX_START):
            raise SandboxError(f"injected fault: the sandbox of world {world_id} failed to start")
        return await asyncio.wait_for(asyncio.to_thread(self.new_copy, world_id), self.options.timeouts.start_s)
