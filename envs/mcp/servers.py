"""MCP servers over the app operations: one server per app, and the gateway serving a sandbox's apps as one endpoint.

Every MCP tool is a registry operation (``envs.apps.TOOLS``): its description is the operation's docstring and its input
schema the JSON schema of its signature (``tool_schema``). A call goes through ``call_tool``, which validates the
arguments itself, so a bad argument comes back with a message naming the tool and the argument (the SDK's own
validation would answer with a raw pydantic dump). Results:

- success: one text block with the operation's output; an empty output stays empty (no content), so a tool that
  returns nothing on success is visible to the caller and the de-risk gate instead of being papered over here;
- ``ToolError`` (and a path that leaves the world): an error result (``is_error=True``) with the message;
- any other exception: an error result naming the exception type; the server keeps serving;
- every text goes out through ``encodable_text``: a lone surrogate (a file name that is not UTF-8) would otherwise
  fail the JSON encoding of the answer and close the connection.

Per-app servers name tools by operation (``read_cell``); the gateway namespaces them as ``<app>_<op>``
(``sheets_read_cell``, see ``mcp_name`` / ``registry_name``).

Example::

    server = build_gateway(World(Path("worlds/ib-1")), variants=frozenset({BadVariant.PDF_FLATTEN}))
    async with mcp.Client(server) as client:
        await client.call_tool("sheets_read_cell", {"path": "models/comps.xlsx", "sheet": "Comps", "cell": "C5"})
"""

from __future__ import annotations

import difflib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.tools.base import Tool as MCPTool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict

from envs.apps import TOOLS, ToolError, World, tool_schema
from envs.apps.base import encodable_text
from envs.faults import TOOL_FAULTS, FaultInjector, FaultKind
from envs.mcp.variants import READ_OP_PREFIXES, BadVariant, Runner, runner_for
from envs.options import APP_NAMES
from envs.paths import PathEscapeError

logger = logging.getLogger(__name__)


# The SDK configures the root logger (basicConfig) and uvicorn at this level when a server is built: WARNING keeps
# per-request lines out of the harness's logs and uvicorn's access log (which it prints on stdout) off.
LOG_LEVEL = "WARNING"
GATEWAY_INSTRUCTIONS = (
    "Tools of the apps of one company's sandbox: {apps}. Tool names are <app>_<operation> (messages may write them "
    "as <app>.<operation>, e.g. sheets.read_cell is the tool sheets_read_cell). File paths are relative to the "
    "root of the company's filesystem."
)


def mcp_name(registry_name: str) -> str:
    """``sheets.read_cell`` -> ``sheets_read_cell`` (the gateway's tool name)."""
    app, _, op = registry_name.partition(".")
    return f"{app}_{op}"


_REGISTRY_BY_MCP_NAME: dict[str, str] = {mcp_name(name): name for name in TOOLS}


def registry_name(name: str) -> str:
    """``sheets_read_cell`` -> ``sheets.read_cell``; raises ToolError naming close matches for an unknown name."""
    if name not in _REGISTRY_BY_MCP_NAME:
        raise ToolError(f"unknown tool {name!r}{did_you_mean(name, _REGISTRY_BY_MCP_NAME)}")
    return _REGISTRY_BY_MCP_NAME[name]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return f"; did you mean {', '.join(close)}?" if close else f"; tools are: {', '.join(sorted(known))}"


CRASH_EXIT_CODE = 75
"""The exit status of a gateway that an injected ``tool_crash`` took down (``os._exit``: no cleanup, like a kill)."""
GARBAGE = '\x1b[2J\ufffd\ufffd {"result": [nul\x00 \u2028 <<<EOF'
"""What an injected ``tool_garbage`` answers instead of the tool's output."""


def faulty_runner(runner: Runner, faults: FaultInjector) -> Runner:
    """``runner`` behind the fault injector (``envs.faults``): a call may hang past the client's timeout, take the
    whole gateway process down, answer garbage, or answer nothing (the tool still runs for the last two)."""

    def run(world: World, args: dict[str, Any]) -> str:
        match faults.pick(TOOL_FAULTS):
            case FaultKind.TOOL_HANG:
                time.sleep(faults.plan.stall_s)  # in a worker thread the client gave up on (abandon_on_cancel)
            case FaultKind.TOOL_CRASH:
                logger.error("injected fault: the gateway process exits now")
                os._exit(CRASH_EXIT_CODE)
            case FaultKind.TOOL_GARBAGE:
                runner(world, args)
                return GARBAGE
            case FaultKind.TOOL_EMPTY:
                runner(world, args)
                return ""
        return runner(world, args)

    return run


def error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=encodable_text(text))], is_error=True)


async def run_tool(runner: Runner, world: World, name: str, arguments: dict[str, Any]) -> CallToolResult:
    """Run a tool in a worker thread (operations block on files and subprocesses); turn its outcome into a result."""
    try:
        # A call the client gave up on (its timeout) returns at once; the operation ends in the background within its
        # own limits (code_exec kills its process group at timeout_s).
        text = await anyio.to_thread.run_sync(runner, world, arguments, abandon_on_cancel=True)
    except ToolError as error:
        return error_result(str(error))
    except PathEscapeError as error:  # raised by variant wrappers that resolve paths themselves
        return error_result(f"{name}: {error}")
    except Exception as error:  # a tool never takes its server down: report the crash to the caller and the log
        logger.exception("tool %s crashed", name)
        return error_result(f"{name} failed unexpectedly: {type(error).__name__}: {error}")
    return CallToolResult(content=[TextContent(type="text", text=encodable_text(text))] if text else [])


class _RawArguments(ArgModelBase):
    """Passes the JSON arguments through untouched: ``call_tool`` validates them against the operation's signature."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def _mcp_tool(
    exposed_name: str, name: str, world: World, variants: frozenset[BadVariant], faults: FaultInjector | None = None
) -> MCPTool:
    runner = runner_for(name, variants)
    if faults is not None:
        runner = faulty_runner(runner, faults)

    async def call(**arguments: Any) -> CallToolResult:
        return await run_tool(runner, world, name, arguments)

    spec = TOOLS[name]
    read_only = spec.fn.__name__.startswith(READ_OP_PREFIXES)
    return raw_tool(exposed_name, spec.description, tool_schema(name), call, read_only)


def raw_tool(
    name: str,
    description: str,
    schema: dict[str, Any],
    call: Callable[..., Awaitable[CallToolResult]],
    read_only: bool | None = None,
) -> MCPTool:
    """An MCP tool whose JSON arguments reach ``call`` untouched (``call`` validates them) and whose listing shows
    ``schema``: the apps' tools here, and the tools a gateway forwards to other servers (``envs.byo.servers``)."""
    return MCPTool(
        fn=call,
        name=name,
        description=description,
        parameters=schema,
        fn_metadata=FuncMetadata(arg_model=_RawArguments),
        is_async=True,
        annotations=ToolAnnotations(read_only_hint=read_only),
    )


class ToolServer(MCPServer):
    """An MCPServer whose answer to an unknown tool name is an error result suggesting the closest names."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:  # the SDK's signature returns CallToolResult | InputRequiredResult
        known = [tool.name for tool in self._tool_manager.list_tools()]
        if name not in known:
            return error_result(f"unknown tool {name!r}{did_you_mean(name, known)}")
        return await super().call_tool(name, arguments, context)


def _check_apps(apps: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(apps))
    unknown = [app for app in chosen if app not in APP_NAMES]
    if unknown or not chosen:
        raise ValueError(f"unknown or no apps {unknown or list(chosen)}; apps are: {', '.join(APP_NAMES)}")
    return chosen


def build_app_server(app: str, world: World, variants: frozenset[BadVariant] = frozenset()) -> MCPServer:
    """The MCP server of one app: its operations under their own names (``read_cell``)."""
    _check_apps([app])
    tools = [_mcp_tool(spec.fn.__name__, name, world, variants) for name, spec in TOOLS.items() if spec.app == app]
    instructions = f"The {app} app of one company's sandbox. File paths are relative to the filesystem root."
    return ToolServer(name=f"rl-recipe-{app}", instructions=instructions, tools=tools, log_level=LOG_LEVEL)


def build_gateway(
    world: World,
    apps: Iterable[str] = APP_NAMES,
    variants: frozenset[BadVariant] = frozenset(),
    faults: FaultInjector | None = None,
) -> MCPServer:
    """One MCP endpoint serving ``apps`` of one world, tools namespaced as ``<app>_<op>``; with ``faults``, every
    tool behind the injector (only in a gateway process of its own: a ``tool_crash`` ends the process)."""
    chosen = _check_apps(apps)
    tools = [
        _mcp_tool(mcp_name(name), name, world, variants, faults) for name, spec in TOOLS.items() if spec.app in chosen
    ]
    instructions = GATEWAY_INSTRUCTIONS.format(apps=", ".join(chosen))
    return ToolServer(name="rl-recipe-gateway", instructions=instructions, tools=tools, log_level=LOG_LEVEL)
