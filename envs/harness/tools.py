"""Tool sessions: what the agent loop calls tools through.

``ToolSession`` is the protocol; three implementations:

* ``LocalToolSession(world)`` calls the app registry (``envs.apps.call_tool``) in a worker thread — no MCP, fast, for
  tests and local rollouts. It exposes the gateway's names (``sheets_read_cell``) so a model sees the same tools.
* ``envs.byo.servers.ExternalTools`` — a world's own MCP servers (``tool_session`` picks it for such a world).
* ``GatewayToolSession(client)`` adapts an open ``envs.mcp.client.GatewayClient`` (whose ``list_tools`` returns MCP
  ``Tool`` objects) to the protocol.

Both report failures the model can act on as ``ToolOutcome(is_error=True)``; only a broken transport raises.

Example::

    async with LocalToolSession(World(Path("worlds/ib-1")), apps=("sheets",)) as tools:
        specs = await tools.list_tools()       # [{"name": "sheets_read_cell", "description": ..., "input_schema": ...}]
        outcome = await tools.call("sheets_read_cell", {"path": "m.xlsx", "sheet": "Model", "cell": "C5"})
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from envs.apps import TOOLS, ToolError, World, call_tool, tool_schema
from envs.apps.base import encodable_text
from envs.byo.servers import ExternalTools
from envs.byo.spec import server_set_of
from envs.mcp.client import GatewayClient, ToolOutcome
from envs.mcp.servers import mcp_name, registry_name
from envs.types import ToolCallRecord

__all__ = [
    "GatewayToolSession",
    "LocalToolSession",
    "ToolOutcome",
    "ToolSession",
    "app_outcome",
    "call_record",
    "error_signature",
    "tool_session",
]


class ToolSession(Protocol):
    """What the agent loop needs from a tool backend."""

    async def list_tools(self) -> list[dict[str, Any]]:
        """Each tool as ``{"name", "description", "input_schema"}`` (the MCP listing, as plain dicts)."""
        ...

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        """Run tool ``name``; model-fixable failures come back with ``is_error``, a broken transport raises."""
        ...


_ERROR_NAME = re.compile(r"\b([A-Z][A-Za-z]*(?:Error|Exception))\b")


def error_signature(outcome: ToolOutcome) -> str:
    """A short class for a failed call: ``timeout``, the first ``XxxError`` named in the text, else ``ToolError``.

    The de-risk stage groups failures by this (e.g. ``ModuleNotFoundError`` → "preinstall the package").
    """
    if outcome.timed_out:
        return "timeout"
    match = _ERROR_NAME.search(outcome.text)
    return match.group(1) if match else "ToolError"


def call_record(turn: int, name: str, args: dict[str, Any], outcome: ToolOutcome) -> ToolCallRecord:
    """The record of one answered call of tool ``name`` (as called), with the error's class and text when it failed."""
    return ToolCallRecord(
        turn=turn,
        tool=name,
        args=args,
        ok=not outcome.is_error,
        error_class=error_signature(outcome) if outcome.is_error else None,
        error=outcome.text[:2000] if outcome.is_error else None,
        returned_empty=outcome.returned_empty,
        latency_s=outcome.latency_s,
    )


class InProcessSession:
    """Base of the tool sessions that run in this process: nothing to open or close, so entering one is free."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class LocalToolSession(InProcessSession):
    """The app registry over one world, called in-process (worker thread); names are the gateway's ``<app>_<op>``."""

    def __init__(self, world: World, apps: Sequence[str] | None = None) -> None:
        known_apps = sorted({tool.app for tool in TOOLS.values()})
        unknown = sorted(set(apps or ()) - set(known_apps))
        if unknown:
            raise ValueError(f"unknown apps {unknown}; apps are: {', '.join(known_apps)}")
        self.world = world
        self._tools = sorted(name for name, tool in TOOLS.items() if apps is None or tool.app in apps)

    async def list_tools(self) -> list[dict[str, Any]]:
        return [
            {"name": mcp_name(name), "description": TOOLS[name].description, "input_schema": tool_schema(name)}
            for name in self._tools
        ]

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        try:
            registry = registry_name(name)
            if registry not in self._tools:
                raise ToolError(f"tool {name!r} is not offered in this session")
        except ToolError as error:
            return ToolOutcome(str(error), is_error=True, latency_s=0.0, returned_empty=False)
        return await asyncio.to_thread(app_outcome, self.world, registry, args)


def app_outcome(world: World, name: str, args: dict[str, Any]) -> ToolOutcome:
    """Call registry tool ``name`` on ``world`` in this thread; a ``ToolError`` (arguments that are no valid Unicode
    text included) becomes an error outcome the model can read, and a tool returning nothing on success is recorded as
    ``returned_empty``. Texts go out through ``encodable_text``, as from the gateway."""
    started = time.perf_counter()
    try:
        text = call_tool(world, name, args)
    except ToolError as error:
        message = encodable_text(str(error))
        return ToolOutcome(message, is_error=True, latency_s=time.perf_counter() - started, returned_empty=False)
    text = "" if text is None else encodable_text(str(text))  # None on success is a bug the records must show
    return ToolOutcome(text, is_error=False, latency_s=time.perf_counter() - started, returned_empty=not text.strip())


def tool_session(world_root: Path, apps: Sequence[str] | None = None) -> AbstractAsyncContextManager[ToolSession]:
    """The tools of a world copy: its own MCP servers when it names them (``envs.byo``), else the apps in-process."""
    servers = server_set_of(world_root)
    return LocalToolSession(World(world_root), apps=apps) if servers is None else ExternalTools(servers, world_root)


class GatewayToolSession:
    """``ToolSession`` over an open ``GatewayClient``: MCP ``Tool`` objects become plain dicts."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client

    async def list_tools(self) -> list[dict[str, Any]]:
        return [
            {"name": t.name, "description": t.description or "", "input_schema": t.input_schema}
            for t in await self.client.list_tools()
        ]

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        return await self.client.call(name, args)
