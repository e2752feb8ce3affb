"""A real multi-node Ray cluster on this one machine: a head and worker nodes as separate ``ray start`` processes, each
with its own CPUs and custom resources (``{"engine": 1}``, ``{"trainer": 1}``), the Jobs API on the head's dashboard.

    cluster = LocalCluster(Path(".cluster/cluster-cpu"), dashboard_port=8265, gcs_port=6380,
                           workers=[LocalNode(resources={"engine": 1}), LocalNode(resources={"trainer": 1})],
                           namespace="rl-recipe-cluster-cpu")
    cluster.start()            # ~30 s; writes cluster.json (pids, ports, the dashboard URL) and auth_token
    cluster.kill_worker(1)     # a node dies: its raylet, its workers, the jobs it ran
    cluster.stop()             # every process of the cluster, and nothing else

Nothing of it answers the network, and nothing answers without the token:

* **its own network namespace** (``namespace``, ``trainer.cluster.netns``): Ray binds every interface and the
  machine's address whatever ``--node-ip-address`` says, so the nodes run where ``lo`` is the only interface, and
  ``trainer.cluster.bridge`` mirrors their ports onto this machine's ``127.0.0.1`` alone. Without a namespace
  (``namespace=None``: no root) Ray's ports are open to the network, guarded by the token only;
* **Ray's token authentication** (``RAY_AUTH_MODE=token``): a new token per start in ``<root>/auth_token`` (mode
  0600), which every node, job and driver reads (``RAY_AUTH_TOKEN_PATH``) and every client sends
  (``Authorization: Bearer``; ``ray_token``).

Each node is its own process group (``ray start --block``, started in a new session); ``stop`` signals those groups —
only while each pid still has the start time recorded for it, so a pid reused after a reboot is never signalled —
then kills what is left in the namespace and whatever still names the cluster's temp folder on its command line
(raylets, GCS, dashboard, workers): never another Ray instance on the machine. The state file lets ``recipe cluster
down`` stop a cluster another process started.
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
from envs.scratch import owner_alive, owner_tag, process_running
from envs.tokens import ensure_token_file, read_token_file
from trainer.cluster.jobs import auth_headers
from trainer.cluster.netns import NamespaceError, NetworkNamespace

START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 15.0
STATE_FILE = "cluster.json"
TOKEN_FILE = "auth_token"
BRIDGE_LOG = "bridge.log"
OBJECT_STORE_BYTES = 200 * 2**20
NODE_START_ATTEMPTS = 3


class ClusterStartError(RecipeError, RuntimeError):
    """The local cluster did not come up; the message names the node and the tail of its log."""


@dataclass(frozen=True)
class LocalNode:
    num_cpus: int = 1
    resources: dict[str, float] = field(default_factory=dict)
    num_gpus: int = 0
    """GPUs declared to Ray: it schedules them without the hardware (a GPU profile's shape on CPUs)."""


@dataclass
class ClusterState:
    dashboard: str
    gcs: str
    temp_dir: str
    pids: list[int]
    logs: list[str]
    started: list[str | None] = field(default_factory=list)
    """Each node's ``envs.scratch.owner_tag`` (pid and start time): a pid is signalled only while it still matches."""
    token_file: str | None = None
    netns: str | None = None
    bridge: list = field(default_factory=list)
    """The bridge's pid and owner tag (a cluster in a namespace)."""


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
        namespace: str | None = None,
        engine_ports: tuple[int, int] | None = None,
    ) -> None:
        """``namespace``: the network namespace the nodes run in (None: this machine's, open to its network);
        ``engine_ports``: the range (both ends included) the run's engines listen in, which the bridge opens here."""
        self.root, self.workers, self.head, self.python = root, workers, head or LocalNode(), python
        self.engine_ports = engine_ports
        self.dashboard_port, self.gcs_port = dashboard_port, gcs_port
        self.namespace = NetworkNamespace(namespace) if namespace else None
        self.state: ClusterState | None = None

    @property
    def dashboard(self) -> str:
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    @property
    def token_file(self) -> Path:
        return self.root / TOKEN_FILE

    @property
    def token(self) -> str:
        return read_token_file(self.token_file)

    def _env(self) -> dict[str, str]:
        return os.environ | {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_file.resolve()),
            "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": f"{Path(self.python).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _node_argv(self, node: LocalNode, head: bool, temp: str) -> list[str]:
        argv = [self.python, "-m", "ray.scripts.scripts", "start", "--block", f"--num-cpus={node.num_cpus}"]
        argv += [f"--num-gpus={node.num_gpus}"]
        argv += [f"--resources={json.dumps(node.resources)}", f"--object-store-memory={OBJECT_STORE_BYTES}"]
        argv += [f"--node-ip-address={LOOPBACK}", "--disable-usage-stats"]
        if head:
            argv += ["--head", f"--port={self.gcs_port}", f"--dashboard-port={self.dashboard_port}"]
            return [*argv, f"--dashboard-host={LOOPBACK}", "--include-dashboard=true", f"--temp-dir={temp}"]
        ports = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port")
        argv += [f"--{name}={free_port()}" for name in (*ports, "metrics-export-port")]
        return [*argv, f"--address={LOOPBACK}:{self.gcs_port}"]

    def _isolate(self, namespace: NetworkNamespace) -> None:
        """The nodes' namespace, and the bridge onto this machine's loopback (``trainer.cluster.bridge``), detached
        like a node."""
        assert self.state is not None
        try:
            namespace.create()
        except NamespaceError as error:
            raise ClusterStartError(
                f"local Ray cluster: {error}; a one-machine cluster runs in a network namespace of its own so that no "
                "other machine reaches it (or set cluster.local.isolation=none: Ray's ports then listen on this "
                "machine's network, guarded by its token only)"
            ) from None
        with (self.root / BRIDGE_LOG).open("a") as handle:
            engines = [f"{self.engine_ports[0]}-{self.engine_ports[1]}"] if self.engine_ports else []
            ports = [str(self.dashboard_port), *engines]
            argv = [self.python, "-m", "trainer.cluster.bridge", namespace.name, *ports]
            bridge = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
        self.state.bridge = [bridge.pid, owner_tag(bridge.pid)]
        atomic_write_json(self.root / STATE_FILE, asdict(self.state))

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ClusterState:
        """Start the head, then each worker once the one before it is alive (a raylet has 30 s to register with the
        GCS: starting them all at once on two busy cores can miss that); return once every node is alive."""
        for port in (self.dashboard_port, self.gcs_port):
            if free_port_taken(port):
                raise ClusterStartError(f"port {port} is taken: another cluster runs here (recipe cluster down?)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_file.unlink(missing_ok=True)  # a new token per start: an old one opens nothing
        ensure_token_file(self.token_file)
        temp = tempfile.mkdtemp(prefix="rr", dir="/tmp")  # short: Ray's socket paths live under it
        netns = self.namespace.name if self.namespace else None
        self.state = ClusterState(
            self.dashboard, f"{LOOPBACK}:{self.gcs_port}", temp, [], [], [], str(self.token_file.resolve()), netns
        )
        try:
            if self.namespace is not None:
                self._isolate(self.namespace)
            for index, (node, head) in enumerate([(self.head, True)] + [(w, False) for w in self.workers]):
                for attempt in range(NODE_START_ATTEMPTS):
                    self._start_node(index, node, head, temp)
                    if head:
                        ready = lambda: _dashboard_ready(self.dashboard, self.token)  # noqa: E731
                        self._wait(ready, "the head's dashboard", index, timeout_s)
                        break
                    if self._wait_alive(index + 1, timeout_s):
                        break
                    if attempt + 1 == NODE_START_ATTEMPTS:
                        self._fail(index, f"node {index} did not join within {NODE_START_ATTEMPTS} attempts")
        except BaseException:  # whatever stopped the start: nothing of it stays behind
            self.stop()
            raise
        return self.state

    def _start_node(self, index: int, node: LocalNode, head: bool, temp: str) -> None:
        assert self.state is not None
        log = self.root / f"node-{index}.log"
        argv = self._node_argv(node, head, temp)
        with log.open("a") as handle:
            process = subprocess.Popen(
                self.namespace.exec_argv(argv) if self.namespace else argv,
                env=self._env(),
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if index < len(self.state.pids):  # a retry of a node that exited
            self.state.pids[index] = process.pid
            self.state.started[index] = owner_tag(process.pid)
        else:
            self.state.pids.append(process.pid)
            self.state.started.append(owner_tag(process.pid))
            self.state.logs.append(str(log))
        atomic_write_json(self.root / STATE_FILE, asdict(self.state))

    def _wait_alive(self, nodes: int, timeout_s: float) -> bool:
        """Until ``nodes`` nodes are alive (True), or the newest node's process exited (False: start it again)."""
        assert self.state is not None
        deadline = time.monotonic() + timeout_s
        while len(alive_nodes(self.dashboard, self.token)) < nodes:
            if not process_running(self.state.pids[-1]):
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
            if not process_running(self.state.pids[node]):
                self._fail(node, f"node {node} exited")
            if time.monotonic() > deadline:
                self._fail(node, f"{what} not up within {timeout_s:g} s")
            time.sleep(1.0)

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index``'s node (a machine that crashed): its process group, raylet and workers included."""
        assert self.state is not None
        _signal_group(self.state.pids[index + 1], self._started(index + 1), signal.SIGKILL)

    def _started(self, index: int) -> str | None:
        assert self.state is not None
        return self.state.started[index] if index < len(self.state.started) else None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.state is None:
            self.state = read_state(self.root)
        if self.state is not None:
            stop_state(self.state, timeout_s)
            (self.root / STATE_FILE).unlink(missing_ok=True)
            self.state = None


def _ours(pid: int, started: str | None) -> bool:
    """Whether ``pid`` is still the process the state recorded: the same start time; for a state written before
    start times were recorded, a process that is Ray's."""
    if started is not None:
        return owner_alive(started) and started.startswith(f"{pid}-")
    try:
        return b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _signal_group(pid: int, started: str | None, signum: int) -> None:
    if _ours(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signum)


def stop_state(state: ClusterState, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Stop every process of the cluster ``state`` describes (see the module docstring)."""
    started = state.started + [None] * (len(state.pids) - len(state.started))
    nodes = list(zip(state.pids, started, strict=True))
    for pid, when in reversed(nodes):  # workers first, the head last
        _signal_group(pid, when, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(process_running(pid) and _ours(pid, when) for pid, when in nodes) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid, when in nodes:
        _signal_group(pid, when, signal.SIGKILL)
    if state.netns is not None:
        NetworkNamespace(state.netns).delete()  # what is left inside; the bridge then sees it gone and exits
    if state.bridge:
        _signal_group(int(state.bridge[0]), state.bridge[1], signal.SIGKILL)
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


def _dashboard_ready(address: str, token: str | None) -> bool:
    try:
        return httpx.get(f"{address}/api/version", headers=auth_headers(token), timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def alive_nodes(address: str, token: str | None = None) -> list[dict]:
    """The cluster's alive nodes (the dashboard's state API, with ``token``): id and total resources of each."""
    try:
        reply = httpx.get(f"{address}/api/v0/nodes", params={"limit": 1000}, headers=auth_headers(token), timeout=10)
        rows = reply.json()["data"]["result"]["result"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []
    return [
        {"node_id": row["node_id"], "resources": row.get("resources_total", {})}
        for row in rows
        if row.get("state") == "ALIVE"
    ]
