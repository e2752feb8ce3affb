"""Tool probes: one known-good call per tool whose arguments hold in every world, run before any rollout.

Oracles only exercise what their tasks need; a probe checks each tool's own promise. ``code_exec.run_python`` says
pandas, openpyxl, pdfplumber, python-docx and python-pptx are installed, so its probe imports them — a sandbox image
without them fails here with ``ModuleNotFoundError`` long before a model's trace would show it (the recipe found its
missing packages that way, from traces). The de-risk stage counts probe calls with the oracle's and the model's in
its per-tool failure and empty-on-success rates.

Example::

    records = await run_probes(client.call)          # one ToolCallRecord per probe, through a gateway client
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from envs.harness.tools import ToolOutcome, call_record
from envs.mcp.servers import mcp_name
from envs.types import ToolCallRecord

ADVERTISED_PACKAGES = ("pandas", "openpyxl", "pdfplumber", "docx", "pptx")
"""What ``code_exec.run_python``'s description promises is importable (docx = python-docx, pptx = python-pptx)."""


@dataclass(frozen=True)
class Probe:
    tool: str
    """Registry name (``app.operation``)."""
    args: dict[str, Any] = field(default_factory=dict)


PROBES: tuple[Probe, ...] = (
    Probe("code_exec.run_python", {"code": f"import {', '.join(ADVERTISED_PACKAGES)}\nprint('packages ok')"}),
    Probe("code_exec.run_bash", {"command": "python -c 'import openpyxl' && echo ok"}),
    Probe("filesystem.list_files", {"path": ".", "recursive": True}),
    Probe("mail.list_messages", {"folder": "inbox"}),
    Probe("chat.list_channels"),
    Probe("calendar.list_events"),
)

AsyncToolCall = Callable[[str, dict[str, Any]], Awaitable[ToolOutcome]]


def probes_for(apps: tuple[str, ...] | None) -> list[Probe]:
    """The probes of the tools a session over ``apps`` offers (None: every app)."""
    return [probe for probe in PROBES if apps is None or probe.tool.partition(".")[0] in apps]


async def run_probes(call: AsyncToolCall, apps: tuple[str, ...] | None = None) -> list[ToolCallRecord]:
    """Each probe through ``call`` (a gateway client's ``call`` or a tool session's), in order, one record each."""
    records = []
    for turn, probe in enumerate(probes_for(apps)):
        records.append(call_record(turn, mcp_name(probe.tool), probe.args, await call(probe.tool, probe.args)))
    return records
