"""The sandbox contract: a ``SandboxProvider`` starts a ``Sandbox`` (a private copy of a world and an MCP gateway
serving it); a registry names the providers; a process-wide reaper kills whatever is still alive at exit.

Example::

    provider = make_provider(ProviderName.LOCAL, {"ib-1": Path("data/worlds/ib-1")})
    sandbox = await provider.start("ib-1")
    outcome = await sandbox.call("sheets.read_cell", {"path": "models/x.xlsx", "sheet": "Model", "cell": "C5"})
    await sandbox.reset()   # the copy is pristine again; the gateway keeps running
    await sandbox.close()
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from envs.mcp.client import GatewayClient, ToolOutcome
from envs.mcp.servers import APP_NAMES
from envs.mcp.variants import BadVariant

log = logging.getLogger(__name__)


class ProviderName(StrEnum):
    LOCAL = "local"
    DOCKER = "docker"


@dataclass(frozen=True)
class SandboxTimeouts:
    """Seconds allowed for each step of a sandbox's life; every wait on a gateway is bounded by one of these."""

    start_s: float = 60.0
    """Copy the world, launch the gateway, finish the MCP handshake."""
    call_s: float = 120.0
    """One tool call (the gateway's answer; code_exec calls carry their own, shorter, limit)."""
    teardown_s: float = 15.0
    """Close the MCP session and stop the gateway; past it the processes are killed."""
    reset_s: float = 60.0
    """Restore the world copy to pristine."""
    health_s: float = 5.0
    """The health check's ping (``Sandbox.healthy``): a gateway that does not answer in time is replaced."""


class SandboxError(RuntimeError):
    """A sandbox could not be started, reset or closed; the message says which world and what failed."""


class Sandbox(ABC):
    """One rollout's world: ``world_root`` (its private copy, on this host) served by ``client``."""

    def __init__(self, world_id: str, world_root: Path, timeouts: SandboxTimeouts) -> None:
        self.world_id = world_id
        self.world_root = world_root
        self.timeouts = timeouts
        self._held: HeldClient | None = None

    @property
    def client(self) -> GatewayClient:
        if self._held is None:
            raise SandboxError(f"sandbox for {self.world_id} at {self.world_root} is closed")
        return self._held.client

    async def open_client(self, client: GatewayClient) -> None:
        """Enter ``client`` (launching its gateway) within ``timeouts.start_s``."""
        self._held = await HeldClient.open(client, self.timeouts.start_s, what=f"gateway for {self.world_id}")

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        """One tool call, bounded by ``timeouts.call_s`` even when the transport itself hangs."""
        try:
            return await asyncio.wait_for(self.client.call(name, args), self.timeouts.call_s)
        except TimeoutError as error:
            raise SandboxError(f"{name} on {self.world_id}: no answer within {self.timeouts.call_s:g} s") from error

    async def healthy(self) -> bool:
        """Whether the gateway still serves: its session is open, the task holding it alive, and it answers a ping
        within ``timeouts.health_s``. A pool asks before it hands a sandbox out."""
        held = self._held
        if held is None or not held.alive:
            return False
        try:
            await asyncio.wait_for(held.client.ping(), self.timeouts.health_s)
        except Exception as error:  # a closed or crashed session raises whatever its transport raises
            log.info(
                "gateway for %s at %s fails its health check: %s: %s",
                self.world_id,
                self.world_root,
                type(error).__name__,
                error,
            )
            return False
        return True

    async def close_client(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            await held.close(self.timeouts.teardown_s)

    @abstractmethod
    async def reset(self) -> None:
        """Bring ``world_root`` back to the pristine world, keeping the gateway running."""

    @abstractmethod
    async def close(self) -> None:
        """Stop the gateway and delete the copy; safe to call twice."""

    @abstractmethod
    def kill(self) -> None:
        """Synchronous last resort (atexit, signals): kill every process of the sandbox and delete the copy."""


class SandboxProvider(ABC):
    """Starts sandboxes on the worlds it knows (``world_root_by_id``: pristine world folders, never written), each
    with a gateway serving ``apps`` (default: every app) — the tool listing a policy sees is exactly these apps'.
    ``variants`` puts known-bad tool variants in front of the apps (``envs.mcp.variants``): the de-risk stage's
    proof that it catches them."""

    def __init__(
        self,
        world_root_by_id: Mapping[str, Path],
        timeouts: SandboxTimeouts | None = None,
        apps: Sequence[str] | None = None,
        variants: frozenset[BadVariant] = frozenset(),
    ) -> None:
        self.world_root_by_id = dict(world_root_by_id)
        self.timeouts = timeouts or SandboxTimeouts()
        unknown = sorted(set(apps or ()) - set(APP_NAMES))
        if unknown:
            raise ValueError(f"unknown apps {unknown}; apps are: {', '.join(APP_NAMES)}")
        self.apps = tuple(apps) if apps else APP_NAMES
        self.variants = frozenset(BadVariant(v) for v in variants)

    def pristine(self, world_id: str) -> Path:
        if world_id not in self.world_root_by_id:
            known = ", ".join(sorted(self.world_root_by_id)) or "none"
            raise SandboxError(f"unknown world {world_id!r}; this provider serves: {known}")
        return self.world_root_by_id[world_id]

    @abstractmethod
    async def start(self, world_id: str) -> Sandbox:
        """A running sandbox on a fresh copy of ``world_id``, within ``timeouts.start_s``."""


# --- holding a client open --------------------------------------------------------------------------------------------


class HeldClient:
    """Keeps a ``GatewayClient`` entered inside a task of its own.

    The client's anyio cancel scopes must be exited by the task that entered them, in order; a pool opens and closes
    sandboxes from many tasks in any order, so each client lives in one dedicated task that enters it, waits for the
    close signal and exits it. Calls from other tasks are fine: they go through the session's memory streams.
    """

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, client: GatewayClient, timeout_s: float, what: str) -> HeldClient:
        held = cls(client)
        held._task = asyncio.create_task(held._hold(), name=f"hold {what}")
        ready = asyncio.create_task(held._ready.wait())
        done, _ = await asyncio.wait({held._task, ready}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if held._ready.is_set():
            return held
        if held._task in done:
            error = held._task.exception()
            raise SandboxError(f"{what} failed to start: {type(error).__name__}: {error}") from error
        await held.close(timeout_s)
        raise SandboxError(f"{what} did not finish its MCP handshake within {timeout_s:g} s")

    @property
    def alive(self) -> bool:
        """False once the client's task has ended: its transport crashed (or it was closed)."""
        return self._task is not None and not self._task.done()

    async def _hold(self) -> None:
        async with self.client:
            self._ready.set()
            await self._closing.wait()

    async def close(self, timeout_s: float) -> None:
        """Exit the client (stopping a stdio gateway); cancel its task when that takes longer than ``timeout_s``."""
        assert self._task is not None
        self._closing.set()
        done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
        if not done:
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=timeout_s)
        if self._task.done() and not self._task.cancelled() and (error := self._task.exception()) is not None:
            log.warning("closing %s: %s: %s", self._task.get_name(), type(error).__name__, error)


# --- the registry -----------------------------------------------------------------------------------------------------

ProviderType = TypeVar("ProviderType", bound=type[SandboxProvider])
PROVIDERS: dict[ProviderName, type[SandboxProvider]] = {}


def register(name: ProviderName) -> Callable[[ProviderType], ProviderType]:
    def add(cls: ProviderType) -> ProviderType:
        if name in PROVIDERS:
            raise ValueError(f"sandbox provider {name} is registered twice")
        PROVIDERS[name] = cls
        return cls

    return add


def make_provider(name: ProviderName | str, world_root_by_id: Mapping[str, Path], **options: Any) -> SandboxProvider:
    """The provider ``name`` (``local`` or ``docker``) on ``world_root_by_id``; options go to its constructor."""
    # The provider modules register themselves on import; importing here keeps the optional docker SDK lazy.
    from envs.sandbox import docker, local  # noqa: F401

    try:
        key = ProviderName(name)
    except ValueError:
        raise ValueError(f"unknown sandbox provider {name!r}; providers are: {', '.join(ProviderName)}") from None
    return PROVIDERS[key](world_root_by_id, **options)


# --- the reaper -------------------------------------------------------------------------------------------------------


class Reaper:
    """Every live sandbox, killed synchronously at interpreter exit or on SIGTERM / SIGHUP, whatever else failed.

    ``install`` chains to the signal handlers already present (and only replaces the defaults in the main thread), so
    a host application keeps its own shutdown logic.
    """

    def __init__(self) -> None:
        self._live: set[Sandbox] = set()
        self._lock = threading.Lock()
        self._installed = False

    def track(self, sandbox: Sandbox) -> None:
        with self._lock:
            self._live.add(sandbox)
        self.install()

    def untrack(self, sandbox: Sandbox) -> None:
        with self._lock:
            self._live.discard(sandbox)

    def live(self) -> list[Sandbox]:
        with self._lock:
            return list(self._live)

    def reap(self) -> int:
        """Kill every tracked sandbox; returns how many there were."""
        with self._lock:
            doomed, self._live = list(self._live), set()
        for sandbox in doomed:
            try:
                sandbox.kill()
            except Exception as error:  # one failure must not spare the others
                log.warning("reaping sandbox %s: %s: %s", sandbox.world_root, type(error).__name__, error)
        return len(doomed)

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        atexit.register(self.reap)
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, self._handler(signal.getsignal(signum)))

    def _handler(self, previous: Any) -> Callable[[int, FrameType | None], None]:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.reap()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:  # the default action: die of the signal, as without us
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        return on_signal


REAPER = Reaper()
