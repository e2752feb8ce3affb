"""GatewayClient over in-memory, stdio (a child gateway process) and streamable HTTP, and the oracle through MCP."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envs.mcp.client import GatewayClient, Transport, gateway_command
from envs.mcp.oracle import run_oracle_via
from envs.mcp.variants import BadVariant
from envs.net import free_port
from envs.oracle import OracleError
from envs.types import Oracle, OracleStep

pytestmark = pytest.mark.anyio

FX = {"path": "reference/fx_eur_usd.txt"}
HTTP_START_TIMEOUT_S = 20.0

ORACLE = Oracle(
    steps=[
        OracleStep(tool="filesystem.read_file", args=FX, save_as="fx"),
        OracleStep(
            tool="sheets.read_sheet",
            args={"path": "models/comps.xlsx", "sheet": "Comps", "cell_range": "A1:C1"},
            extract=r"C1=(.+)",
            save_as="header",
        ),
        OracleStep(tool="filesystem.write_file", args={"path": "out/fx.txt", "content": "fx=${fx}"}),
    ],
    answer="${header} at ${fx}",
)


async def test_inmemory_call_by_either_name(world_dir: Path) -> None:
    async with GatewayClient(Transport.INMEMORY, world=world_dir) as client:
        by_registry = await client.call("filesystem.read_file", FX)
        by_mcp = await client.call("filesystem_read_file", FX)
        error = await client.call("filesystem.read_file", {"path": "nope.txt"})
        assert len(await client.list_tools()) == 32
    assert by_registry.text == by_mcp.text == "1.0821\n"
    assert not by_registry.is_error and not by_registry.returned_empty and 0 < by_registry.latency_s < 5
    assert error.is_error and not error.returned_empty and "nope.txt" in error.text


async def test_call_timeout_is_an_error_outcome_and_the_session_survives(world_dir: Path) -> None:
    async with GatewayClient(Transport.INMEMORY, world=world_dir, call_timeout_s=0.3) as client:
        slow = await client.call("code_exec.run_python", {"code": "import time; time.sleep(1.5)"})
        after = await client.call("filesystem.read_file", FX)
    assert slow.timed_out and slow.is_error and "0.3 s call timeout" in slow.text and 0.3 <= slow.latency_s < 1.5
    assert after.text == "1.0821\n"


def test_client_arguments_are_checked(world_dir: Path) -> None:
    with pytest.raises(ValueError, match="the http transport needs url="):
        GatewayClient(Transport.HTTP, world=world_dir)
    with pytest.raises(ValueError, match="the stdio transport needs world="):
        GatewayClient(Transport.STDIO, url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValueError, match="needs a port"):
        gateway_command(world_dir, Transport.HTTP)


async def test_stdio_gateway_serves_tools_and_variants(world_dir: Path) -> None:
    variant = frozenset({BadVariant.SLIDES_RETURNS_NONE})
    async with GatewayClient(
        Transport.STDIO, world=world_dir, apps=["filesystem", "slides"], variants=variant
    ) as client:
        names = sorted(tool.name for tool in await client.list_tools())
        fx = await client.call("filesystem.read_file", FX)
        escape = await client.call("filesystem.read_file", {"path": "../../etc/passwd"})
        added = await client.call("slides.add_slide", {"path": "d.pptx", "title": "T", "bullets": []})
    assert names == [
        "filesystem_list_files",
        "filesystem_read_file",
        "filesystem_search_files",
        "filesystem_write_file",
        "slides_add_slide",
        "slides_read_deck",
    ]
    assert fx.text == "1.0821\n" and escape.is_error and "root:x:0" not in escape.text
    assert added.returned_empty and (world_dir / "filesystem" / "d.pptx").is_file()


@pytest.fixture
def http_gateway(world_dir: Path) -> Iterator[str]:
    """A gateway process serving ``world_dir`` over HTTP on a free port; yields its URL once it accepts connections."""
    port = free_port()
    process = subprocess.Popen(gateway_command(world_dir, Transport.HTTP, port=port), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + HTTP_START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the HTTP gateway did not start: {process.stderr.read().decode()}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_http_gateway(http_gateway: str, world_dir: Path) -> None:
    async with GatewayClient(Transport.HTTP, url=http_gateway) as client:
        fx = await client.call("filesystem.read_file", FX)
        bad = await client.call("sheets.read_cell", {"path": "models/comps.xlsx", "sheet": "Comp", "cell": "A1"})
        run = await run_oracle_via(client, ORACLE)
    assert fx.text == "1.0821\n"
    assert bad.is_error and "sheets are: Comps" in bad.text
    assert (
        run.answer == "EV (USD m) at 1.0821"
        and (world_dir / "filesystem" / "out" / "fx.txt").read_text() == "fx=1.0821"
    )


@pytest.mark.parametrize("transport", [Transport.INMEMORY, Transport.STDIO])
async def test_oracle_runs_through_the_gateway(transport: Transport, world_dir: Path) -> None:
    async with GatewayClient(transport, world=world_dir) as client:
        run = await run_oracle_via(client, ORACLE)
        broken = Oracle(steps=[*ORACLE.steps[:1], OracleStep(tool="sheets.read_cell", args={"path": "x.xlsx"})])
        with pytest.raises(
            OracleError, match=r"step 1 \(sheets.read_cell\) failed: sheets.read_cell: missing argument"
        ):
            await run_oracle_via(client, broken)
    assert run.answer == "EV (USD m) at 1.0821"
    assert run.saved == {"fx": "1.0821", "header": "EV (USD m)"}
    assert (world_dir / "filesystem" / "out" / "fx.txt").read_text() == "fx=1.0821"
