"""A network namespace of the cluster's own, whose only interface is its loopback.

Ray listens beyond loopback whatever it is told: with ``--node-ip-address=127.0.0.1`` the GCS, raylets and the
dashboard agent's gRPC servers still bind every interface, the dashboard agent's HTTP job API and the runtime-env
agent bind the machine's address, and Ray resolves ``127.0.0.1`` to that address on its own. Inside a namespace whose
only interface is ``lo`` there is nothing else to bind: every port of every node is reachable from this namespace
and nowhere else. ``trainer.cluster.bridge`` mirrors its ports onto this machine's loopback, so the stages, the CLI and
the tests reach the dashboard and the engines at ``127.0.0.1:PORT`` as before.

Needs root and iproute2's ``ip`` (``unavailable`` says why not).

    namespace = NetworkNamespace("rl-recipe-cluster-cpu")
    namespace.create()                        # lo up, nothing else
    subprocess.Popen(namespace.exec_argv(["ray", "start", ...]))
    namespace.delete()                        # kills what is left inside first
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from envs.errors import RecipeError

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
IP_TIMEOUT_S = 30.0
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class NamespaceError(RecipeError, OSError):
    """A namespace could not be made, entered or removed; the message says why and what to do."""


@functools.cache
def unavailable() -> str | None:
    """Why this process cannot make network namespaces (None: it can: a probe namespace was made and removed)."""
    if os.geteuid() != 0:
        return "making a network namespace needs root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    probe = f"rl-recipe-probe-{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except NamespaceError as error:
        return f"this machine refuses network namespaces ({error})"
    _ip("netns", "delete", probe)
    return None


def enter(path: Path) -> None:
    """Move the calling thread into the network namespace at ``path`` (sockets it makes afterwards live there)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise NamespaceError(f"cannot enter the network namespace {path}: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)


def _ip(*args: str) -> None:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NamespaceError(f"`ip {' '.join(args)}` failed: {error}") from None
    if done.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")


class NetworkNamespace:
    """The named namespace under ``/run/netns`` (module docstring)."""

    def __init__(self, name: str) -> None:
        if not _NAME.match(name):
            raise NamespaceError(f"{name!r} is not a namespace name (letters, digits, '.', '_', '-'; at most 64)")
        self.name = name

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        """A fresh namespace with its loopback up; one left by a cluster that was not stopped is removed first."""
        why = unavailable()
        if why is not None:
            raise NamespaceError(why)
        if self.exists():
            self.delete()
        _ip("netns", "add", self.name)
        _ip("-n", self.name, "link", "set", "lo", "up")

    def exec_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` replaces itself with it: same pid)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def pids(self) -> list[int]:
        """Every process inside the namespace."""
        if not self.exists():
            return []
        try:
            done = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return [int(word) for word in done.stdout.split() if word.isdigit()]

    def delete(self) -> None:
        """SIGKILL whatever still runs inside (everything in it is the cluster's), then remove the namespace."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.exists():
            _ip("netns", "delete", self.name)
