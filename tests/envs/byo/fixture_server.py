"""A deliberately broken MCP server for the de-risk tests: a tool that always errors, one that hangs, one that takes
the server down. The working servers in these tests are real third-party ones (mcp-server-git, -sqlite, filesystem).

    python fixture_server.py               # over stdio
    python fixture_server.py --port 8123   # over streamable HTTP at http://127.0.0.1:8123/mcp
"""

import os
import sys
import time

from mcp.server import MCPServer

server = MCPServer(name="broken", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Answer with the text."""
    return text


@server.tool()
def always_fails(path: str) -> str:
    """Read a report (it never can)."""
    raise RuntimeError(f"cannot open {path}: the backend is down")


@server.tool()
def hang(seconds: float = 3600.0) -> str:
    """Answer after a long time."""
    time.sleep(seconds)
    return "late"


@server.tool()
def die() -> str:
    """Take the server down."""
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--port":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), streamable_http_path="/mcp")
    else:
        server.run("stdio")
