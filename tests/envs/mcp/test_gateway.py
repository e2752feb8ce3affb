"""The gateway process: argument errors, stdout carrying nothing but the protocol, the SDK's own stdio client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from envs.mcp.client import Transport, gateway_command
from envs.mcp.gateway import parse_args

PROCESS_TIMEOUT_S = 30


def test_bad_arguments_are_named(world_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--world", str(tmp_path / "nowhere")])
    assert "no filesystem/ folder there" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--world", str(world_dir), "--apps", "sheets,excel"])
    assert "unknown app(s) excel" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--world", str(world_dir), "--variant", "slides_ok"])
    assert "argument --variant: invalid BadVariant value: 'slides_ok'" in capsys.readouterr().err
    args = parse_args(["--world", str(world_dir), "--variant", "pdf_flatten", "--apps", "pdf,sheets"])
    assert args.variant == ["pdf_flatten"] and args.apps == ["pdf", "sheets"] and args.transport is Transport.STDIO


def test_stdio_stdout_carries_only_the_protocol(world_dir: Path) -> None:
    """Send initialize and tools/list as raw JSON-RPC lines; every stdout line must be a JSON-RPC message."""
    requests = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    process = subprocess.Popen(
        [*gateway_command(world_dir, apps=["calendar"]), "--log-level", "INFO"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    for request in requests:
        process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    replies = [json.loads(process.stdout.readline()) for _ in range(2)]  # one per request with an id
    try:
        _, stderr = process.communicate(timeout=PROCESS_TIMEOUT_S)  # closing stdin ends the server
    finally:
        process.kill()
    assert [reply["id"] for reply in replies] == [1, 2]
    assert replies[0]["result"]["serverInfo"]["name"] == "rl-recipe-gateway"
    assert [tool["name"] for tool in replies[1]["result"]["tools"]] == [
        "calendar_list_events",
        "calendar_read_event",
        "calendar_search_events",
        "calendar_create_event",
    ]
    assert "gateway on" in stderr  # at --log-level INFO; over stdio the default is WARNING (quiet pools)


@pytest.mark.anyio
async def test_sdk_client_session_over_stdio(world_dir: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "envs.mcp.gateway", "--world", str(world_dir)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("mail_read_message", {"message_id": "m001"})
        missing = await session.call_tool("mail_read_message", {})
    assert not result.is_error and "operating_model.xlsx" in result.content[0].text  # type: ignore[union-attr]
    assert missing.is_error and "missing argument 'message_id'" in missing.content[0].text  # type: ignore[union-attr]
