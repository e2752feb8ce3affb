"""A warm pool of sandboxes per world: acquire one, use it, and it is reset to pristine as it goes back.

Starting a sandbox (copy the world, launch the gateway, MCP handshake) costs about a second; resetting a warm one
restores only the files a rollout changed (``benchmarks/sandbox_pool.py`` prints the ratio). Up to
``size_per_world`` sandboxes per world exist at once: ``start`` warms them all, an ``acquire`` waits while all are
busy. The pool never hands out a sandbox it has not checked: a warm one must pass ``Sandbox.healthy`` (its gateway
answers a ping) as it is handed out — one check covers a gateway that a rollout crashed and one that died while idle —
and a sandbox that fails the check (``PoolStats.replaced``), or whose reset fails, is closed and replaced by a fresh
one: one rollout that crashed its gateway cannot poison the rollouts after it. A start that fails (``SandboxError``
or ``OSError``: a copy or a gateway that did not come up) is retried ``start_retries`` times with full-jitter backoff
(``PoolStats.start_retries``) before the acquire fails with it. Every sandbox is also known to the
process-wide ``REAPER`` (``envs.sandbox.reaper``: atexit, SIGTERM, SIGHUP), so none outlives the process.

Example::

    async with SandboxPool(make_provider("local", worlds), size_per_world=4) as pool:
        async with pool.acquire("ib-1") as sandbox:
            await sandbox.call("filesystem.write_file", {"path": "out.txt", "content": "x"})
        pool.stats.summary()   # {"acquires": 1, "acquire_wait_p50_s": ..., "reset_p50_s": ..., ...}
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from envs.openai_http import backoff_delay_s
from envs.sandbox.base import Sandbox, SandboxError, SandboxProvider
from envs.sandbox.reaper import REAPER

log = logging.getLogger(__name__)

START_BACKOFF_BASE_S, START_BACKOFF_MAX_S = 0.2, 5.0
RETRYABLE_START_ERRORS: tuple[type[Exception], ...] = (SandboxError, OSError, TimeoutError)


@dataclass
class PoolStats:
    """Raw timings, one entry per event; ``summary`` reduces them to counts, medians and maxima."""

    acquire_wait_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    start_s: list[float] = field(default_factory=list)
    failed_resets: int = 0
    replaced: int = 0
    """Sandboxes closed because their gateway failed the health check before being handed out."""
    start_retries: int = 0
    """Starts that failed and were tried again."""

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {"acquires": len(self.acquire_wait_s), "starts": len(self.start_s)}
        for name, values in (("acquire_wait", self.acquire_wait_s), ("reset", self.reset_s), ("start", self.start_s)):
            if values:
                out[f"{name}_p50_s"] = statistics.median(values)
                out[f"{name}_max_s"] = max(values)
        out["failed_resets"] = self.failed_resets
        out["replaced"] = self.replaced
        out["start_retries"] = self.start_retries
        return out


class _WorldSlots:
    """The sandboxes of one world: idle ones in a queue, and how many exist (idle, busy or starting)."""

    def __init__(self, size: int) -> None:
        self.idle: asyncio.Queue[Sandbox] = asyncio.Queue()
        self.capacity = asyncio.Semaphore(size)  # one permit per sandbox that may still be created
        self.live: set[Sandbox] = set()


class SandboxPool:
    """Warm sandboxes for the worlds of ``provider`` (or only ``world_ids``), ``size_per_world`` each."""

    def __init__(
        self,
        provider: SandboxProvider,
        size_per_world: int = 1,
        world_ids: Iterable[str] | None = None,
        start_retries: int = 2,
    ):
        if size_per_world < 1:
            raise ValueError(f"size_per_world must be at least 1, got {size_per_world}")
        ids = list(world_ids) if world_ids is not None else list(provider.world_root_by_id)
        for world_id in ids:
            provider.pristine(world_id)  # an unknown id fails here, naming the known ones
        self.provider = provider
        self.size_per_world = size_per_world
        self.start_retries = start_retries
        self._rng = random.Random(0)
        self.stats = PoolStats()
        self._slots = {world_id: _WorldSlots(size_per_world) for world_id in ids}
        self._closed = False
        REAPER.install()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start every sandbox of every world (concurrently), so the first acquires do not wait. The first copy this
        process makes under the provider's scratch sweeps what sandboxes of dead processes left
        (``envs.scratch.owned_folder``)."""
        jobs = [self._new(world_id) for world_id, slots in self._slots.items() for _ in range(self.size_per_world)]
        for sandbox in await asyncio.gather(*jobs):
            self._slots[sandbox.world_id].idle.put_nowait(sandbox)

    @asynccontextmanager
    async def acquire(self, world_id: str) -> AsyncIterator[Sandbox]:
        """A pristine sandbox of ``world_id`` for the duration of the block; reset and returned to the pool after."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        if world_id not in self._slots:
            raise SandboxError(f"world {world_id!r} is not in this pool; it holds: {', '.join(sorted(self._slots))}")
        waited = time.perf_counter()
        sandbox = await self._take(world_id)
        self.stats.acquire_wait_s.append(time.perf_counter() - waited)
        try:
            yield sandbox
        finally:
            await self._release(sandbox)

    async def _take(self, world_id: str) -> Sandbox:
        """An idle sandbox that passes its health check, a new one if the world has room, else the first one released
        (checked too); a sandbox that fails the check is closed, which makes room for a new one."""
        slots = self._slots[world_id]
        while True:
            if not slots.idle.empty():
                sandbox = slots.idle.get_nowait()
            elif not slots.capacity.locked():
                return await self._new(world_id)  # its MCP handshake just succeeded
            else:
                sandbox = await slots.idle.get()
            try:
                healthy = await sandbox.healthy()
            except BaseException:  # cancelled mid-check: the sandbox goes back as it was
                slots.idle.put_nowait(sandbox)
                raise
            if healthy:
                return sandbox
            self.stats.replaced += 1
            self._note_retry("sandbox_replaced")
            log.warning("the gateway of %s failed its health check; replacing it", sandbox.world_root)
            await self._discard(slots, sandbox)

    async def _new(self, world_id: str) -> Sandbox:
        slots = self._slots[world_id]
        await slots.capacity.acquire()
        started = time.perf_counter()
        try:
            sandbox = await self._start(world_id)
        except BaseException:
            slots.capacity.release()
            raise
        self.stats.start_s.append(time.perf_counter() - started)
        slots.live.add(sandbox)
        return sandbox

    async def _start(self, world_id: str) -> Sandbox:
        for retry in range(self.start_retries + 1):
            try:
                return await self.provider.start(world_id)
            except RETRYABLE_START_ERRORS as error:
                if retry == self.start_retries:
                    raise
                self.stats.start_retries += 1
                self._note_retry("sandbox_start")
                log.warning("starting a sandbox of %s failed (%s); retrying", world_id, error)
                await asyncio.sleep(backoff_delay_s(retry, START_BACKOFF_BASE_S, START_BACKOFF_MAX_S, self._rng))
        raise AssertionError("unreachable")

    def _note_retry(self, what: str) -> None:
        if self.provider.options.faults is not None:  # a chaos run tallies recoveries next to the injected faults
            self.provider.options.faults.note_retry(what, "pool")

    async def _release(self, sandbox: Sandbox) -> None:
        slots = self._slots[sandbox.world_id]
        if not self._closed:
            started = time.perf_counter()
            try:
                await sandbox.reset()
            except Exception as error:  # the sandbox cannot be trusted any more: replace it
                self.stats.failed_resets += 1
                log.warning("reset of %s failed (%s); replacing it", sandbox.world_root, error)
            else:
                self.stats.reset_s.append(time.perf_counter() - started)
                slots.idle.put_nowait(sandbox)
                return
        await self._discard(slots, sandbox)

    async def _discard(self, slots: _WorldSlots, sandbox: Sandbox) -> None:
        slots.live.discard(sandbox)
        try:
            await sandbox.close()
        finally:
            slots.capacity.release()

    async def close(self) -> None:
        """Close every idle sandbox now; busy ones are closed as they are released."""
        self._closed = True
        for slots in self._slots.values():
            idle = [slots.idle.get_nowait() for _ in range(slots.idle.qsize())]
            await asyncio.gather(*(self._discard(slots, sandbox) for sandbox in idle))
