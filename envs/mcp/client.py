"""``GatewayClient``: one MCP session to a world's gateway, over the in-process, stdio or streamable-HTTP transport.

- ``inmemory``: the gateway is built in this process (``build_gateway``); no serialisation, for tests and fast checks.
- ``stdio``: ``python -m envs.mcp.gateway --world DIR`` is launched as a child process (about 1 s and 66 MB each).
- ``http``: a running gateway (``--transport http``) at ``url``, e.g. ``http://127.0.0.1:8765/mcp``.

Every call has a timeout (default 60 s; the handshake and tool listing have their own). A call that times out comes
back as an error outcome with ``timed_out=True``. A call whose name or arguments are no valid Unicode text (a lone
surrogate: ``envs.apps.base.check_encodable``) comes back as an error outcome without being sent, since encoding it
would close the session; answers go through ``encodable_text``. A broken transport raises; ``ping`` tells whether the
session still answers. Open several clients one after the other inside one task: each holds anyio cancel scopes that
must close in the order they opened.

Example::

    async with GatewayClient(Transport.STDIO, world=Path("worlds/ib-1")) as client:
        outcome = await client.call("sheets.read_cell", {"path": "models/operating_model.xlsx", "sheet": "Model",
                                                         "cell": "C5"})
        outcome.text, outcome.is_error, outcome.latency_s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import mcp
from mcp.client.stdio import StdioServerParameters
from mcp.server import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import REQUEST_TIMEOUT, TextContent

from envs.apps import ToolError, World
from envs.apps.base import check_encodable, encodable_text
from envs.faults import FaultPlan
from envs.mcp.servers import APP_NAMES, build_gateway, mcp_name
from envs.mcp.variants import BadVariant

DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_START_TIMEOUT_S = 30.0
TIMED_OUT_META = "rl-recipe/timed_out"
"""Set in a result's ``_meta`` by a gateway that proxies other servers when one of them did not answer in time:
``GatewayClient.call`` reads it back as ``timed_out`` (``envs.byo.servers``)."""


def timeout_text(name: str, timeout_s: float) -> str:
    """What a call that got no answer in time reads as."""
    return f"{name}: no answer within the {timeout_s:g} s call timeout"


class Transport(StrEnum):
    INMEMORY = "inmemory"
    STDIO = "stdio"
    HTTP = "http"


@dataclass(frozen=True)
class ToolOutcome:
    text: str
    """The text blocks of the result joined by newlines (a non-text block appears as ``[<type> content]``)."""
    is_error: bool
    latency_s: float
    returned_empty: bool
    """A successful call whose output is empty or whitespace: a tool bug the de-risk gate counts."""
    timed_out: bool = False


def gateway_command(
    world: Path,
    transport: Transport = Transport.STDIO,
    *,
    apps: Sequence[str] = APP_NAMES,
    variants: frozenset[BadVariant] = frozenset(),
    host: str = "127.0.0.1",
    port: int | None = None,
    faults: FaultPlan | None = None,
) -> list[str]:
    """The command line that starts a gateway process on ``world`` (stdio, or HTTP on ``host:port``), injecting
    tool faults when ``faults`` is on."""
    command = [sys.executable, "-m", "envs.mcp.gateway", "--world", str(world), "--apps", ",".join(apps)]
    command += [arg for variant in sorted(variants) for arg in ("--variant", str(variant))]
    if faults is not None and faults.enabled:
        command += ["--faults", faults.model_dump_json()]
    if transport is Transport.HTTP:
        if port is None:
            raise ValueError("an HTTP gateway needs a port")
        command += ["--transport", "http", "--host", host, "--port", str(port)]
    elif transport is not Transport.STDIO:
        raise ValueError(f"only stdio and http gateways run as processes, not {transport}")
    return command


def _target(
    transport: Transport, world: Path | None, url: str | None, apps: Sequence[str], variants: frozenset[BadVariant]
) -> MCPServer | StdioServerParameters | str:
    """What ``mcp.Client`` connects to: the gateway built here, the command that launches it, or its URL."""
    match transport:
        case Transport.INMEMORY if world is not None and url is None:
            return build_gateway(World(world), apps, variants)
        case Transport.STDIO if world is not None and url is None:
            command = gateway_command(world, Transport.STDIO, apps=apps, variants=variants)
            return StdioServerParameters(command=command[0], args=command[1:])
        case Transport.HTTP if url is not None and world is None:
            return url
    needs = "url= (the running gateway's address) and no world" if transport is Transport.HTTP else "world= and no url"
    raise ValueError(f"the {transport} transport needs {needs}")


class GatewayClient:
    """An async context manager holding one MCP session to a gateway; see the module docstring."""

    def __init__(
        self,
        transport: Transport,
        *,
        world: Path | None = None,
        url: str | None = None,
        apps: Sequence[str] = APP_NAMES,
        variants: frozenset[BadVariant] = frozenset(),
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        self._connect(transport, _target(transport, world, url, apps, variants), call_timeout_s, start_timeout_s)

    def _connect(
        self, transport: Transport, target: MCPServer | StdioServerParameters | str, call_s: float, start_s: float
    ) -> None:
        self.transport = transport
        self.call_timeout_s = call_s
        # The session's default read timeout bounds the handshake and the tool listing; calls pass their own.
        self._client = mcp.Client(target, read_timeout_seconds=start_s)

    @classmethod
    def for_command(
        cls,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> GatewayClient:
        """A stdio session to a gateway started by an explicit command, e.g. a sandbox's (``docker exec -i ...``).

        ``env`` is added to the process environment: the MCP SDK passes only a few safe variables to a stdio server,
        and a sandbox's resource limits must reach code execution.
        """
        client = cls.__new__(cls)
        server = StdioServerParameters(command=command[0], args=list(command[1:]), env=dict(env or {}), cwd=cwd)
        client._connect(Transport.STDIO, server, call_timeout_s, start_timeout_s)
        return client

    async def __aenter__(self) -> Self:
        await self._client.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._client.__aexit__(exc_type, exc, tb)

    async def ping(self) -> None:
        """A round trip to the gateway (``tools/list`` past the client's cache; MCP's own ping is deprecated): returns
        when it answered, raises when the session is broken."""
        await self._client.list_tools(cache_mode="bypass")

    async def list_tools(self) -> list[mcp.types.Tool]:
        return (await self._client.list_tools()).tools

    async def call(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        """Call a tool by gateway name (``sheets_read_cell``) or registry name (``sheets.read_cell``)."""
        exposed = mcp_name(name) if "." in name else name
        started = time.perf_counter()
        try:
            check_encodable(exposed, args)
        except ToolError as error:  # the model's fault: a corrective observation, and the session stays open
            return ToolOutcome(str(error), is_error=True, latency_s=0.0, returned_empty=False)
        try:
            result = await self._client.call_tool(exposed, args, read_timeout_seconds=self.call_timeout_s)
        except MCPError as error:
            if error.code != REQUEST_TIMEOUT:
                raise
            text = timeout_text(exposed, self.call_timeout_s)
            return ToolOutcome(
                text, is_error=True, latency_s=time.perf_counter() - started, returned_empty=False, timed_out=True
            )
        latency_s = time.perf_counter() - started
        text = encodable_text(
            "\n".join(
                block.text if isinstance(block, TextContent) else f"[{block.type} content]" for block in result.content
            )
        )
        timed_out = result.is_error and bool((result.meta or {}).get(TIMED_OUT_META))  # a proxied server's timeout
        empty = not result.is_error and not text.strip()
        return ToolOutcome(text, result.is_error, latency_s, returned_empty=empty, timed_out=timed_out)
