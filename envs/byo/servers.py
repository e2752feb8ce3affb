"""A world's own MCP servers as one tool session (``ExternalTools``), and as one gateway (``build_proxy``).

``ExternalTools(servers, world_root)`` opens an MCP session to each server of a built world (``envs.byo.spec``): a
stdio server is started on the world copy (``{world}`` is its ``filesystem/``), a loopback HTTP server is connected
to. Each server's tools are listed once, kept to its ``tools`` list, and offered as ``<server>_<tool>``; a call goes
to its server with the server's ``timeout_s``. Outcomes are classified like the project's apps':

- the server answers with an error, or rejects the arguments (a JSON-RPC error): the model's to fix, an error outcome;
- no answer within ``timeout_s``: an error outcome with ``timed_out`` (the de-risk gate's timeout rate);
- the session breaks (the server exited): ``ServerGoneError``, an infra failure that ends the rollout;
- a server that cannot start (a wrong command, a missing secret, no handshake in ``start_timeout_s``):
  ``ServerStartError`` naming the server.

The gateway process serves a built world this way (``python -m envs.mcp.gateway --world W`` on a world with
``mcp_servers.json``), so a sandbox starts the servers inside itself; rollouts on a plain world copy use
``ExternalTools`` in-process (``envs.harness.tools.tool_session``).

Example::

    async with ExternalTools(server_set_of(world), world) as tools:
        await tools.list_tools()                               # [{"name": "git_git_log", ...}, ...]
        outcome = await tools.call("git_git_log", {"repo_path": "/.../filesystem", "max_count": 1})
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from mcp.server import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, CallToolResult, TextContent

from envs.apps import ToolError
from envs.apps.base import check_encodable
from envs.byo.spec import ServerSet, ServerSpec, expand
from envs.errors import RecipeError
from envs.mcp.client import TIMED_OUT_META, GatewayClient, ToolOutcome, Transport, timeout_text
from envs.mcp.servers import CRASH_EXIT_CODE, LOG_LEVEL, ToolServer, did_you_mean, error_result, raw_tool

logger = logging.getLogger(__name__)

TRANSPORT_GRACE_S = 5.0
"""Past a server's own call timeout, how long a call may wait on a transport that does not even deliver the timeout."""


class ServerStartError(RecipeError, RuntimeError):
    """A server that could not be started or reached; ``server`` names it."""

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        super().__init__(f"MCP server {server}: {reason}")


class ServerGoneError(RecipeError, ConnectionError):
    """A server whose session broke mid-rollout (it exited or closed the connection): an infra failure."""


@dataclass(frozen=True)
class _Route:
    server: ServerSpec
    client: GatewayClient
    tool: str


def offered_name(server: str, tool: str) -> str:
    """``git`` + ``git_log`` -> ``git_git_log``: server names are letters and digits, so the first ``_`` splits."""
    return f"{server}_{tool}"


def _server_env(server: ServerSpec, world: Path) -> dict[str, str]:
    env = {key: str(expand(value, world)) for key, value in server.env.items()}
    for name, host_name in server.secrets.items():
        value = os.environ.get(host_name)
        if value is None:
            raise ServerStartError(server.name, f"secret {name} reads host variable {host_name}, which is not set")
        env[name] = value
    return env


def _client(server: ServerSpec, world: Path) -> GatewayClient:
    if server.url is not None:
        return GatewayClient(
            Transport.HTTP, url=server.url, call_timeout_s=server.timeout_s, start_timeout_s=server.start_timeout_s
        )
    assert server.command is not None  # the spec holds exactly one of command and url
    command = [str(part) for part in expand(list(server.command), world)]
    if shutil.which(command[0]) is None:
        raise ServerStartError(server.name, f"command {command[0]!r} not found (is the server installed?)")
    cwd = Path(expand(server.cwd, world))
    return GatewayClient.for_command(
        command,
        env=_server_env(server, world),
        cwd=cwd,
        call_timeout_s=server.timeout_s,
        start_timeout_s=server.start_timeout_s,
    )


MAX_STARTING = max(1, os.cpu_count() or 1)
"""Stdio servers starting at once in one process: a start is mostly imports (a verifiers toolset imports for ~4 s),
and a group of rollouts starting all theirs together starved each other past their handshake timeout."""
_START_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


@asynccontextmanager
async def _starting(server: ServerSpec) -> AsyncIterator[None]:
    """Hold one of the event loop's ``MAX_STARTING`` start slots while a stdio server starts (an HTTP one needs none);
    its start timeout runs from when it holds the slot."""
    if server.command is None:
        yield
        return
    slots = _START_SLOTS.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(MAX_STARTING))
    async with slots:
        yield


def _described(error: BaseException) -> str:
    """One line for what a failed start raised (anyio wraps the transport's error in exception groups)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


class ExternalTools:
    """Sessions to one world's servers; ``ToolSession`` over them. See the module docstring."""

    def __init__(self, servers: ServerSet, world_root: Path) -> None:
        self.servers = servers
        self.filesystem = world_root.resolve() / "filesystem"
        self._stack = AsyncExitStack()
        self._routes: dict[str, _Route] = {}
        self._listing: list[dict[str, Any]] = []

    async def __aenter__(self) -> Self:
        try:
            for server in self.servers.servers:
                await self._open(server)
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._stack.aclose()

    async def _open(self, server: ServerSpec) -> None:
        client = _client(server, self.filesystem)
        try:
            async with _starting(server), asyncio.timeout(server.start_timeout_s + TRANSPORT_GRACE_S):
                await self._stack.enter_async_context(client)
                tools = await client.list_tools()
        except TimeoutError:
            raise ServerStartError(server.name, f"no handshake within {server.start_timeout_s:g} s") from None
        except Exception as error:  # whatever the transport raised: a process that exited, a refused connection
            raise ServerStartError(server.name, f"did not start: {_described(error)}") from None
        listed = {tool.name: tool for tool in tools}
        wanted = server.tools if server.tools is not None else tuple(listed)
        if missing := [name for name in wanted if name not in listed]:
            raise ServerStartError(
                server.name, f"lists no tool {missing[0]!r}{did_you_mean(missing[0], listed)} (its tools: list)"
            )
        for name in wanted:
            exposed = offered_name(server.name, name)
            self._routes[exposed] = _Route(server, client, name)
            self._listing.append(
                {
                    "name": exposed,
                    "description": listed[name].description or "",
                    "input_schema": listed[name].input_schema,
                }
            )

    @property
    def offered(self) -> list[dict[str, Any]]:
        """Each offered tool as ``{"name", "description", "input_schema"}``."""
        return list(self._listing)

    async def list_tools(self) -> list[dict[str, Any]]:
        return self.offered

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        exposed = name.replace(".", "_", 1) if "." in name else name  # an oracle step's <server>.<tool>
        route = self._routes.get(exposed)
        if route is None:
            text = f"unknown tool {exposed!r}{did_you_mean(exposed, self._routes)}"
            return ToolOutcome(text, is_error=True, latency_s=0.0, returned_empty=False)
        try:
            check_encodable(exposed, args)
        except ToolError as error:
            return ToolOutcome(str(error), is_error=True, latency_s=0.0, returned_empty=False)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(route.server.timeout_s + TRANSPORT_GRACE_S):
                outcome = await route.client.call(route.tool, args)
        except TimeoutError:
            text = timeout_text(exposed, route.server.timeout_s)
            return ToolOutcome(text, True, time.perf_counter() - started, returned_empty=False, timed_out=True)
        except MCPError as error:
            if error.code == CONNECTION_CLOSED:  # the server exited under the call
                raise ServerGoneError(f"MCP server {route.server.name} closed during {exposed}: {error}") from None
            # any other JSON-RPC error (bad arguments, say): the model's to fix
            text = f"{exposed}: {error}"
            return ToolOutcome(text, is_error=True, latency_s=time.perf_counter() - started, returned_empty=False)
        except Exception as error:
            raise ServerGoneError(
                f"MCP server {route.server.name} broke during {exposed}: {_described(error)}"
            ) from None
        if outcome.timed_out:  # the text names the server's own tool: name the offered one
            return ToolOutcome(timeout_text(exposed, route.server.timeout_s), True, outcome.latency_s, False, True)
        return outcome


def _result(outcome: ToolOutcome) -> CallToolResult:
    if outcome.timed_out:  # marked, so the client on the other side of this gateway records a timeout too
        return error_result(outcome.text).model_copy(update={"meta": {TIMED_OUT_META: True}})
    content = [TextContent(type="text", text=outcome.text)] if outcome.text else []
    return error_result(outcome.text) if outcome.is_error else CallToolResult(content=content)


def build_proxy(tools: ExternalTools) -> MCPServer:
    """One MCP endpoint forwarding to ``tools``' servers (open): what a sandbox's gateway serves for such a world. A
    server whose session breaks takes this process down (``CRASH_EXIT_CODE``), so the sandbox is replaced."""

    def forward(name: str):
        async def call(**arguments: Any) -> CallToolResult:
            try:
                return _result(await tools.call(name, arguments))
            except ServerGoneError:
                logger.exception("the gateway exits: a server it forwards to is gone")
                os._exit(CRASH_EXIT_CODE)

        return call

    listing = [
        raw_tool(spec["name"], spec["description"], spec["input_schema"], forward(spec["name"]))
        for spec in tools.offered
    ]
    names = ", ".join(server.name for server in tools.servers.servers)
    instructions = f"Tools of the {tools.servers.environment} environment's MCP servers ({names}): <server>_<tool>."
    return ToolServer(name="rl-recipe-proxy", instructions=instructions, tools=listing, log_level=LOG_LEVEL)


async def serve_proxy(
    servers: ServerSet, world_root: Path, transport: Transport, host: str, port: int, path: str
) -> None:
    """Open the world's servers, then serve them as one gateway until the client leaves (stdio) or the process ends."""
    async with ExternalTools(servers, world_root) as tools:
        server = build_proxy(tools)
        if transport is Transport.STDIO:
            await server.run_stdio_async()
        else:
            await server.run_streamable_http_async(host=host, port=port, streamable_http_path=path)
