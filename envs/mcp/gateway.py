"""Serve one world's apps as one MCP endpoint (tools ``<app>_<op>``), over stdio or streamable HTTP.

    python -m envs.mcp.gateway --world worlds/ib-1                          # stdio (the client launches it)
    python -m envs.mcp.gateway --world worlds/ib-1 --transport http --port 8765   # http://127.0.0.1:8765/mcp
    python -m envs.mcp.gateway --world W --apps sheets,pdf --variant pdf_flatten  # a subset, a known-bad variant
    python -m envs.mcp.gateway --world W --faults '{"rate": 0.1}'                  # injected tool faults

In stdio mode stdout carries the protocol only: every log line goes to stderr. Tools read and write the world folder
in place (give each rollout its own copy). A world with ``mcp_servers.json`` (a team's own servers: ``envs.byo``)
is served by forwarding to those servers, started here on the world (``--apps`` and ``--variant`` do not apply).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import anyio

from envs.apps import World
from envs.byo.servers import serve_proxy
from envs.byo.spec import server_set_of
from envs.faults import FaultPlan
from envs.mcp.client import Transport
from envs.mcp.servers import APP_NAMES, build_gateway
from envs.mcp.variants import BadVariant

HTTP_PATH = "/mcp"
SERVED_TRANSPORTS = (Transport.STDIO, Transport.HTTP)  # in-memory is not a process


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m envs.mcp.gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=Path, required=True, help="world folder holding filesystem/ and apps_data/")
    parser.add_argument("--transport", type=Transport, choices=SERVED_TRANSPORTS, default=Transport.STDIO)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--variant", type=BadVariant, choices=list(BadVariant), action="append", default=[], help="known-bad variant"
    )
    parser.add_argument(
        "--faults", type=FaultPlan.model_validate_json, help="a FaultPlan as JSON: inject tool faults (envs.faults)"
    )
    parser.add_argument("--apps", default=",".join(APP_NAMES), help=f"comma-separated subset of {','.join(APP_NAMES)}")
    parser.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="default: INFO over HTTP; WARNING over stdio (a sandbox pool starts dozens of gateways)",
    )
    args = parser.parse_args(argv)
    args.log_level = args.log_level or ("WARNING" if args.transport is Transport.STDIO else "INFO")
    if not (args.world / "filesystem").is_dir():
        parser.error(f"--world {args.world}: no filesystem/ folder there (is it a world folder?)")
    args.apps = [app for app in args.apps.split(",") if app]
    if unknown := sorted(set(args.apps) - set(APP_NAMES)):
        parser.error(f"--apps: unknown app(s) {', '.join(unknown)}; apps are: {', '.join(APP_NAMES)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log_format = "%(asctime)s %(name)s %(levelname)s %(message)s"
    logging.basicConfig(level=args.log_level, stream=sys.stderr, format=log_format)
    if (servers := server_set_of(args.world)) is not None:  # a world of a team's own servers: forward to them
        logging.getLogger(__name__).info("gateway on %s: servers of %s", args.world, servers.environment)
        anyio.run(serve_proxy, servers, args.world, args.transport, args.host, args.port, HTTP_PATH)
        return
    world = World(args.world.resolve())
    faults = args.faults.injector(f"gateway:{args.world.name}") if args.faults else None
    server = build_gateway(world, args.apps, frozenset(args.variant), faults)
    logging.getLogger(__name__).info(
        "gateway on %s: apps %s, variants %s, transport %s",
        args.world,
        args.apps,
        args.variant or "none",
        args.transport,
    )
    if args.transport is Transport.STDIO:
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.port, streamable_http_path=HTTP_PATH)


if __name__ == "__main__":
    main()
