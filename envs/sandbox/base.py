"""The sandbox contract: a ``SandboxProvider`` starts a ``Sandbox`` (a private copy of a world and an MCP gateway
serving it) with the ``SandboxOptions`` every sandbox of that provider shares; each wait on a gateway is bounded by
one of the ``SandboxTimeouts``. The providers (``local``, ``docker``) build on ``envs.sandbox.copy_backed``; the
registry that names them is ``envs.sandbox.registry``; the reaper that kills what is alive at exit is
``envs.sandbox.reaper``.

Example::

    provider = make_provider(ProviderName.LOCAL, {"ib-1": Path("data/worlds/ib-1")}, SandboxOptions(apps=("sheets",)))
    sandbox = await provider.start("ib-1")
    outcome = await sandbox.call("sheets.read_cell", {"path": "models/x.xlsx", "sheet": "Model", "cell": "C5"})
    await sandbox.reset()   # the copy is pristine again; the gateway keeps running
    await sandbox.close()
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.faults import FaultPlan
from envs.mcp.client import GatewayClient, ToolOutcome
from envs.mcp.servers import APP_NAMES
from envs.mcp.variants import BadVariant
from envs.sandbox.limits import ResourceLimits

log = logging.getLogger(__name__)

DEFAULT_SCRATCH = Path(tempfile.gettempdir()) / "rl-recipe-sandboxes"


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


@dataclass(frozen=True)
class SandboxOptions:
    """What every sandbox of one provider is like: the apps its gateway serves (default: every app) — the tool listing a
    policy sees is exactly these apps' —, the known-bad tool ``variants`` put in front of them (``envs.mcp.variants``:
    the de-risk stage's proof that it catches them), the resource ``limits`` on the code it runs, its ``timeouts``,
    the ``scratch`` folder its world copies live under, and the injected ``faults`` (``envs.faults``: sandbox starts
    that fail, tool calls in its gateway that hang, crash it, or answer garbage or nothing)."""

    apps: Sequence[str] | None = None
    variants: frozenset[BadVariant] = frozenset()
    limits: ResourceLimits = field(default_factory=ResourceLimits.from_env)
    timeouts: SandboxTimeouts = field(default_factory=SandboxTimeouts)
    scratch: Path = DEFAULT_SCRATCH
    faults: FaultPlan | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.apps or ()) - set(APP_NAMES))
        if unknown:
            raise ValueError(f"unknown apps {unknown}; apps are: {', '.join(APP_NAMES)}")
        object.__setattr__(self, "apps", tuple(self.apps) if self.apps else APP_NAMES)
        object.__setattr__(self, "variants", frozenset(BadVariant(v) for v in self.variants))


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

    async def open_gateway(self, command: list[str], env: dict[str, str], cwd: Path | None) -> None:
        """Launch the stdio gateway ``command`` (in ``cwd``, with ``env`` added to its environment) and enter its
        client within ``timeouts.start_s``: the one place that says how a sandbox's gateway is started
        (``envs.mcp.client.gateway_command`` gives the command itself)."""
        client = GatewayClient.for_command(
            command, env=env, cwd=cwd, call_timeout_s=self.timeouts.call_s, start_timeout_s=self.timeouts.start_s
        )
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
    as ``options`` say (default: ``SandboxOptions()``)."""

    def __init__(self, world_root_by_id: Mapping[str, Path], options: SandboxOptions | None = None) -> None:
        self.world_root_by_id = dict(world_root_by_id)
        self.options = options or SandboxOptions()

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
