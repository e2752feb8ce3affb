"""The official MCP Inspector CLI lists the stdio gateway's tools (needs npx and the @modelcontextprotocol/inspector
package from the npm registry or the npm cache; skipped with the reason when either is missing)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from envs.mcp.client import gateway_command

pytestmark = pytest.mark.integration

INSPECTOR_TIMEOUT_S = 240
# npm's ways of saying the package could not be fetched (offline, registry unreachable, package gone).
UNAVAILABLE = ("ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT", "ECONNREFUSED", "E404", "network")


def test_inspector_cli_lists_the_gateway_tools(world_dir: Path) -> None:
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx is not installed")
    command = [npx, "-y", "@modelcontextprotocol/inspector", "--cli", *gateway_command(world_dir, apps=["sheets"])]
    try:
        done = subprocess.run(
            [*command, "--method", "tools/list"], capture_output=True, text=True, timeout=INSPECTOR_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"the inspector did not finish within {INSPECTOR_TIMEOUT_S} s (package download?)")
    if done.returncode != 0 and any(marker in done.stderr for marker in UNAVAILABLE):
        pytest.skip(f"@modelcontextprotocol/inspector is unavailable: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    tools = json.loads(done.stdout)["tools"]
    assert [tool["name"] for tool in tools] == [
        "sheets_list_sheets",
        "sheets_read_sheet",
        "sheets_read_cell",
        "sheets_read_formula",
        "sheets_write_cell",
    ]
    assert all(tool["description"] and tool["inputSchema"]["type"] == "object" for tool in tools)
