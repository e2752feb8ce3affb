"""A real multi-node Ray cluster on this one machine: a head and worker nodes as separate ``ray start`` processes, each
with its own CPUs and custom resources (``{"engine": 1}``, ``{"trainer": 1}``), the Jobs API on the head's dashboard.

    cluster = LocalCluster(Path(".cluster/cluster-cpu"), dashboard_port=8265, gcs_port=6380,
                           workers=[LocalNode(resources={"engine": 1}), LocalNode(resources={"trainer": 1})])
    cluster.start()            # ~30 s; writes cluster.json (pids, ports, the dashboard URL)
    cluster.kill_worker(1)     # a node dies: its raylet, its workers, the jobs it ran
    cluster.stop()             # every process of the cluster, and nothing else

Each node is its own process group (``ray start --block``, started in a new session); ``stop`` signals those groups,
then kills whatever still names the cluster's temp folder on its command line (raylets, GCS, dashboard, workers)
— never another Ray instance on the machine. The state file lets ``recipe cluster down`` stop a cluster another
process started. Ray binds its own services to the machine's interface address (it resolves ``127.0.0.1`` to it;
the traffic never leaves the machine); the dashboard and every engine of ours listen on ``127.0.0.1``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from envs.errors import RecipeError
from envs.files import atomic_write_json
from envs.net import LOOPBACK, free_port

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 15.0
STATE_FILE = "cluster.json"
OBJECT_STORE_BYTES = 200 * 2**20
NODE_START_ATTEMPTS = 3


class ClusterStartError(RecipeError, RuntimeError):
    """The local cluster did not come up; the message names the node and the tail of its log."""


@dataclass(frozen=True)
class LocalNode:
    num_cpus: int = 1
    resources: dict[str, float] = field(default_factory=dict)


@dataclass
class ClusterState:
    dashboard: str
    gcs: str
    temp_dir: str
    pids: list[int]
    logs: list[str]


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().split(") ", 1)[-1].startswith("Z"))


def pids_naming(marker: str) -> list[int]:
    """Processes (other than this one) whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class LocalCluster:
    """See the module docstring."""

    def __init__(
        self,
        root: Path,
        *,
        dashboard_port: int,
        gcs_port: int,
        workers: list[LocalNode],
        head: LocalNode | None = None,
        python: str = sys.executable,
    ) -> None:
        self.root, self.workers, self.head, self.python = root, workers, head or LocalNode(), python
        self.dashboard_port, self.gcs_port = dashboard_port, gcs_port
        self.state: ClusterState | None = None

    @property
    def dashboard(self) -> str:
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    def _env(self) -> dict[str, str]:
        return os.environ | {
            "RAY_AUTH_MODE": "disabled",
            "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": f"{Path(self.python).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _node_argv(self, node: LocalNode, head: bool, temp: str) -> list[str]:
        argv = [self.python, "-m", "ray.scripts.scripts", "start", "--block", f"--num-cpus={node.num_cpus}"]
        argv += [f"--resources={json.dumps(node.resources)}", f"--object-store-memory={OBJECT_STORE_BYTES}"]
        argv += [f"--node-ip-address={LOOPBACK}", "--disable-usage-stats"]
        if head:
            argv += ["--head", f"--port={self.gcs_port}", f"--dashboard-port={self.dashboard_port}"]
            return [*argv, f"--dashboard-host={LOOPBACK}", "--include-dashboard=true", f"--temp-dir={temp}"]
        ports = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port")
        argv += [f"--{name}={free_port()}" for name in (*ports, "metrics-export-port")]
        return [*argv, f"--address={LOOPBACK}:{self.gcs_port}"]

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ClusterState:
        """Start the head, then each worker once the one before it is alive (a raylet has 30 s to register with the
        GCS: starting them all at once on two busy cores can miss that); return once every node is alive."""
        for port in (self.dashboard_port, self.gcs_port):
            if free_port_taken(port):
                raise ClusterStartError(f"port {port} is taken: another cluster runs here (recipe cluster down?)")
        self.root.mkdir(parents=True, exist_ok=True)
        temp = tempfile.mkdtemp(prefix="rr", dir="/tmp")  # short: Ray's socket paths live under it
        self.state = ClusterState(self.dashboard, f"{LOOPBACK}:{self.gcs_port}", temp, [], [])
        for index, (node, head) in enumerate([(self.head, True)] + [(w, False) for w in self.workers]):
            for attempt in range(NODE_START_ATTEMPTS):
                self._start_node(index, node, head, temp)
                if head:
                    self._wait(lambda: _dashboard_ready(self.dashboard), "the head's dashboard", index, timeout_s)
                    break
                if self._wait_alive(index + 1, timeout_s):
                    break
                if attempt + 1 == NODE_START_ATTEMPTS:
                    self._fail(index, f"node {index} did not join within {NODE_START_ATTEMPTS} attempts")
        return self.state

    def _start_node(self, index: int, node: LocalNode, head: bool, temp: str) -> None:
        assert self.state is not None
        log = self.root / f"node-{index}.log"
        with log.open("a") as handle:
            process = subprocess.Popen(
                self._node_argv(node, head, temp),
                env=self._env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if index < len(self.state.pids):  # a retry of a node that exited
            self.state.pids[index] = process.pid
        else:
            self.state.pids.append(process.pid)
            self.state.logs.append(str(log))
        atomic_write_json(self.root / STATE_FILE, asdict(self.state))

    def _wait_alive(self, nodes: int, timeout_s: float) -> bool:
        """Until ``nodes`` nodes are alive (True), or the newest node's process exited (False: start it again)."""
        assert self.state is not None
        deadline = time.monotonic() + timeout_s
        while len(alive_nodes(self.dashboard)) < nodes:
            if not _running(self.state.pids[-1]):
                return False
            if time.monotonic() > deadline:
                self._fail(len(self.state.pids) - 1, f"node not alive within {timeout_s:g} s")
            time.sleep(1.0)
        return True

    def _fail(self, index: int, problem: str) -> None:
        assert self.state is not None
        tail = Path(self.state.logs[index]).read_text(errors="replace")[-2000:]
        self.stop()
        raise ClusterStartError(f"local Ray cluster: {problem}; its log ends:\n{tail}")

    def _wait(self, ready, what: str, node: int, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
        assert self.state is not None
        deadline = time.monotonic() + timeout_s
        while not ready():
            if not _running(self.state.pids[node]):
                self._fail(node, f"node {node} exited")
            if time.monotonic() > deadline:
                self._fail(node, f"{what} not up within {timeout_s:g} s")
            time.sleep(1.0)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index``'s node (a machine that crashed): its process group, raylet and workers included."""
        assert self.state is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.state.pids[index + 1], signal.SIGKILL)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.state is None:
            self.state = read_state(self.root)
        if self.state is not None:
            stop_state(self.state, timeout_s)
            (self.root / STATE_FILE).unlink(missing_ok=True)
            self.state = None


def stop_state(state: ClusterState, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop every process of the cluster ``state`` describes (see the module docstring)."""
    for pid in reversed(state.pids):  # workers first, the head last
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(_running(pid) for pid in state.pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in state.pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for pid in pids_naming(state.temp_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def read_state(root: Path) -> ClusterState | None:
    path = root / STATE_FILE
    try:
        return ClusterState(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def free_port_taken(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


def _dashboard_ready(address: str) -> bool:
    try:
        return httpx.get(f"{address}/api/version", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def alive_nodes(address: str) -> list[dict]:
    """The cluster's alive nodes (the dashboard's state API): id and total resources of each."""
    try:
        reply = httpx.get(f"{address}/api/v0/nodes", params={"limit": 1000}, timeout=10)
        rows = reply.json()["data"]["result"]["result"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []
    return [
        {"node_id": row["node_id"], "resources": row.get("resources_total", {})}
        for row in rows
        if row.get("state") == "ALIVE"
    ]
