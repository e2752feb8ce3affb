"""This machine's loopback as a window into a cluster's network namespace:
``python -m trainer.cluster.bridge NETNS PORT|LOW-HIGH...``.

A cluster in a namespace of its own (``trainer.cluster.netns``) answers nobody outside it — neither the network nor
this machine. The bridge opens the ports this machine needs, on its loopback only: each of the given ports (the
dashboard; the range the run's engines take) that something inside listens on is served at ``127.0.0.1:PORT`` here
(checked every ``POLL_S``), and each connection to it is relayed, byte for byte, to ``127.0.0.1:PORT`` inside. So the
stages, the CLI and the tests reach the dashboard and the engines where they did before, no address but loopback
reaches anything, and the rest of Ray's ports (the GCS, raylets, workers, their metrics) are not reachable from here
at all. What it opens still wants its token (Ray's, the engines'): the bridge adds a route, not access.

How: one thread of this process lives in the namespace (``setns``); it reads the namespace's listening sockets and
opens the inner connections — sockets keep the namespace they were made in — while the event loop, in this
machine's namespace, accepts and relays. A port already taken here is left unmirrored and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from envs.net import LOOPBACK
from trainer.cluster.netns import NETNS_DIR, enter

POLL_S = 0.5
CONNECT_TIMEOUT_S = 10.0
CHUNK = 1 << 16
LISTEN = "0A"


def listening_ports() -> set[int]:
    """TCP ports something listens on in the calling thread's network namespace (IPv4 and IPv6)."""
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/thread-self/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == LISTEN:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def connect_inside(port: int) -> socket.socket:
    """A connection to ``port`` inside the namespace (run on the namespace's thread)."""
    connection = socket.create_connection((LOOPBACK, port), timeout=CONNECT_TIMEOUT_S)
    connection.setblocking(False)
    return connection


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


class Bridge:
    """See the module docstring."""

    def __init__(self, namespace: Path, wanted: set[int]) -> None:
        self.wanted = wanted
        self.inside = ThreadPoolExecutor(1, thread_name_prefix="netns", initializer=enter, initargs=(namespace,))
        self.servers: dict[int, asyncio.Server] = {}
        self.refused: set[int] = set()

    async def run(self, namespace: Path) -> None:
        """Mirror until the namespace is gone (``recipe cluster down`` removes it, then stops this process)."""
        loop = asyncio.get_running_loop()
        while namespace.exists():
            ports = await loop.run_in_executor(self.inside, listening_ports) & self.wanted
            for port in sorted(ports - self.servers.keys() - self.refused):
                try:
                    self.servers[port] = await asyncio.start_server(self._relay(port), LOOPBACK, port)
                except OSError as error:
                    self.refused.add(port)
                    print(f"[bridge] port {port} is taken here ({error.strerror}): not mirrored", flush=True)
            for port in self.servers.keys() - ports:
                self.servers.pop(port).close()
            self.refused &= ports
            await asyncio.sleep(POLL_S)

    def _relay(self, port: int):  # type: ignore[no-untyped-def]
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            loop = asyncio.get_running_loop()
            try:
                inner = await loop.run_in_executor(self.inside, connect_inside, port)
                inner_reader, inner_writer = await asyncio.open_connection(sock=inner)
            except OSError:
                writer.close()
                return
            await asyncio.gather(_pipe(reader, inner_writer), _pipe(inner_reader, writer))

        return relay


def parse_ports(words: list[str]) -> set[int]:
    """``8265 18000-18063`` → those ports (a range includes both ends)."""
    ports: set[int] = set()
    for word in words:
        low, _, high = word.partition("-")
        ports.update(range(int(low), int(high or low) + 1))
    return ports


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m trainer.cluster.bridge NETNS_NAME PORT|LOW-HIGH...", file=sys.stderr)
        return 2
    namespace = NETNS_DIR / argv[0]
    if not namespace.exists():
        print(f"[bridge] no network namespace {namespace}", file=sys.stderr)
        return 1
    print(f"[bridge] mirroring ports {' '.join(argv[1:])} of {namespace} onto {LOOPBACK}", flush=True)
    asyncio.run(Bridge(namespace, parse_ports(argv[1:])).run(namespace))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
