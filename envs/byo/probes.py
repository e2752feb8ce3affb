"""De-risk without oracles: do a world's servers start, and does each tool keep its schema's promise?

A task file need not carry oracles, so the calls known to be right come from elsewhere:

* ``check_servers`` — each server alone, started on a copy of each world and asked for its tools: a wrong command, a
  missing secret, a server that crashes at start or lists no tool it was asked for is a finding naming the server;
* user probes (``probes.calls`` in the environment file) — calls the author knows succeed on every world, with an
  optional substring the answer must hold: known-good, so a failure is the tool's;
* schema probes — one call per offered tool, arguments built from its input schema: by name from
  ``probes.arguments``, else the property's ``default``, first ``enum`` or first ``examples`` value. A probe whose
  every required argument came that way is known-good too; one that needed a type placeholder (``"probe"``, ``1``)
  only shows whether the tool answers in time and with something (its error may be the placeholder's fault), so it
  counts towards the timeout and empty rates and not the failure rate.

``{world}`` in probe arguments is the world copy's ``filesystem/``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.byo.servers import ExternalTools, ServerStartError
from envs.byo.spec import ProbeSpec, ServerSet, expand
from envs.harness.tools import ToolOutcome, call_record
from envs.sandbox.world_copy import fork_world
from envs.scratch import scratch_dir
from envs.types import ToolCallRecord

PLACEHOLDERS: dict[str, Any] = {"string": "probe", "integer": 1, "number": 1.0, "boolean": False, "array": []}
"""A value of each JSON-schema type, for a required argument nothing else fills."""

AsyncToolCall = Callable[[str, dict[str, Any]], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class PlannedProbe:
    tool: str
    """As offered (``git_git_log``)."""
    args: dict[str, Any]
    known_good: bool
    expect: str | None = None


@dataclass(frozen=True)
class ServerCheck:
    world_id: str
    server: str
    tools: int
    seconds: float
    error: str | None = None


def _type_of(prop: dict[str, Any]) -> str:
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind is None and prop.get("anyOf"):
        kind = next((alt.get("type") for alt in prop["anyOf"] if alt.get("type") not in (None, "null")), "string")
    return str(kind or "string")


def schema_arguments(schema: dict[str, Any], known: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Arguments for one call of a tool with input ``schema``, and whether every required one had a known value
    (``known`` by name, the schema's default, enum or examples) rather than a type placeholder."""
    properties: dict[str, Any] = schema.get("properties") or {}
    args: dict[str, Any] = {name: value for name, value in known.items() if name in properties}
    complete = True
    for name in schema.get("required") or []:
        if name in args:
            continue
        prop = properties.get(name) or {}
        if "default" in prop:
            args[name] = prop["default"]
        elif prop.get("enum"):
            args[name] = prop["enum"][0]
        elif prop.get("examples"):
            args[name] = prop["examples"][0]
        else:
            args[name], complete = PLACEHOLDERS.get(_type_of(prop), "probe"), False
    return args, complete


def planned_probes(servers: ServerSet, listing: list[dict[str, Any]]) -> list[PlannedProbe]:
    """The user probes, then one schema probe per offered tool (``listing``: a session's ``list_tools``)."""
    spec: ProbeSpec = servers.probes
    probes = [PlannedProbe(c.offered(servers.servers), dict(c.args), True, c.expect) for c in spec.calls]
    for tool in listing:
        args, complete = schema_arguments(tool.get("input_schema") or {}, spec.arguments)
        probes.append(PlannedProbe(tool["name"], args, complete))
    return probes


def _checked(outcome: ToolOutcome, expect: str | None) -> ToolOutcome:
    if outcome.is_error or expect is None or expect in outcome.text:
        return outcome
    text = f"UnexpectedAnswer: the probe expects {expect!r} in the answer, which reads: {outcome.text[:300]!r}"
    return ToolOutcome(text, is_error=True, latency_s=outcome.latency_s, returned_empty=outcome.returned_empty)


async def run_planned(
    call: AsyncToolCall, probes: list[PlannedProbe], filesystem: Path
) -> list[tuple[ToolCallRecord, bool]]:
    """Each probe through ``call``, in order: its record and whether it was known-good."""
    done = []
    for turn, probe in enumerate(probes):
        args = expand(probe.args, filesystem)
        outcome = _checked(await call(probe.tool, args), probe.expect)
        done.append((call_record(turn, probe.tool, args, outcome), probe.known_good))
    return done


async def check_servers(world_id: str, world_root: Path, servers: ServerSet) -> list[ServerCheck]:
    """Each of the world's ``servers`` started alone on a copy of it; a failure's ``error`` says why."""
    checks = []
    for server in servers.servers:
        started = time.perf_counter()
        with scratch_dir(f"server-check-{world_id}-") as scratch:
            copy = fork_world(world_root, Path(scratch) / world_id)
            try:
                async with ExternalTools(servers.model_copy(update={"servers": (server,)}), copy) as tools:
                    count = len(tools.offered)
                checks.append(ServerCheck(world_id, server.name, count, time.perf_counter() - started))
            except ServerStartError as error:
                checks.append(ServerCheck(world_id, server.name, 0, time.perf_counter() - started, str(error)))
    return checks
