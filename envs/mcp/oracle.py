"""Run a task's oracle through an MCP gateway: the same script ``envs.oracle.run_oracle`` runs, every call over MCP.

``run_oracle`` is synchronous; it runs in a worker thread and each of its tool calls hops back onto the event loop
that owns the MCP session (``anyio.from_thread.run``). So the substitution, extraction and error rules are those of
``envs.oracle`` itself, not a copy.

Example::

    async with GatewayClient(Transport.STDIO, world=world_copy) as client:
        run = await run_oracle_via(client, task.oracle)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio.from_thread
import anyio.to_thread

from envs.mcp.client import GatewayClient, ToolOutcome
from envs.oracle import OracleRun, run_oracle
from envs.types import Oracle

OnOutcome = Callable[[str, dict[str, Any], ToolOutcome], None]


class GatewayToolError(RuntimeError):
    """A tool answered an oracle step with an error result (``run_oracle`` reports it as that step's failure)."""


async def run_oracle_via(client: GatewayClient, oracle: Oracle, on_outcome: OnOutcome | None = None) -> OracleRun:
    """Run ``oracle`` step by step through ``client``; raises ``OracleError`` naming the first step that failed.

    ``on_outcome(name, args, outcome)`` sees every answered call, failed ones included (the oracle check records them).
    """

    def call_tool(name: str, args: dict[str, Any]) -> str:
        outcome = anyio.from_thread.run(client.call, name, args)
        if on_outcome is not None:
            on_outcome(name, args, outcome)
        if outcome.is_error:
            raise GatewayToolError(outcome.text)
        return outcome.text

    return await anyio.to_thread.run_sync(run_oracle, oracle, call_tool)
