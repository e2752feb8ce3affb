"""Red-team finding 1 (docs/reliability.md): ``recipe cluster up`` exposed Ray to the network with authentication off
— one unauthenticated POST to a node's job API ran a shell command as root.

The cluster here is started exactly as ``recipe cluster up`` starts it (``LocalCluster`` in its own network
namespace, Ray's token authentication on, the bridge onto loopback). A second namespace joined to this machine by a
veth pair plays another machine on the network: from its address, every port any node listens on, and every port
the bridge opens, must refuse — while a plain listener on this machine's address answers it (the probe can reach
this machine, so a refusal means something). On loopback, nothing answers without the token, and the nodes' own
ports (the GCS, raylets, agents, metrics) are not reachable from this machine at all. Traffic stays on this machine:
the probe's only route is the veth pair.

Needs root, iproute2 and ``.venv-cluster`` (Ray with its dashboard and job agent): ``make test-network``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from envs.net import free_port
from tests.processes import running
from trainer.cluster.bridge import listening_ports
from trainer.cluster.local_cluster import LocalCluster, LocalNode, read_state
from trainer.cluster.netns import NetworkNamespace, enter, unavailable

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PYTHON = REPO / ".venv-cluster" / "bin" / "python"
PROBE_NET = "10.213.77"
"""The veth pair's /30: this machine's end .1, the probe's .2 (a documentation-style private range no test leaves)."""

pytestmark = [
    pytest.mark.network,
    pytest.mark.timeout(600),
    pytest.mark.skipif(unavailable() is not None, reason=f"needs network namespaces: {unavailable()}"),
    pytest.mark.skipif(not CLUSTER_PYTHON.exists(), reason="needs .venv-cluster: make install-cluster"),
]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def probe() -> Iterator[NetworkNamespace]:
    """Another machine on the network: a namespace whose veth peer gives this machine the address ``.1``."""
    tag = os.getpid() % 10000
    namespace, host_end, probe_end = NetworkNamespace(f"rr-probe-{tag}"), f"rrh{tag}", f"rrp{tag}"
    namespace.create()
    try:
        ip("link", "add", host_end, "type", "veth", "peer", "name", probe_end)
        ip("link", "set", probe_end, "netns", namespace.name)
        ip("addr", "add", f"{PROBE_NET}.1/30", "dev", host_end)
        ip("link", "set", host_end, "up")
        ip("-n", namespace.name, "addr", "add", f"{PROBE_NET}.2/30", "dev", probe_end)
        ip("-n", namespace.name, "link", "set", probe_end, "up")
        yield namespace
    finally:
        namespace.delete()  # takes the veth pair with it
        subprocess.run(["ip", "link", "delete", host_end], capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    engine_low = free_port()
    local = LocalCluster(
        tmp_path_factory.mktemp("cluster"),
        dashboard_port=free_port(),
        gcs_port=free_port(),
        workers=[LocalNode(resources={"engine": 1})],
        python=str(CLUSTER_PYTHON),
        namespace=f"rr-cluster-{os.getpid() % 10000}",
        engine_ports=(engine_low, engine_low + 3),
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def in_namespace(namespace: NetworkNamespace, work):  # type: ignore[no-untyped-def]
    """``work()`` on a thread inside ``namespace`` (what a process on that machine would see)."""
    result: dict = {}

    def run() -> None:
        enter(namespace.path)
        result["value"] = work()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=300)
    return result["value"]


def answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=2):
            return True
    except OSError:
        return False


def test_no_port_of_the_cluster_answers_another_machine(cluster: LocalCluster, probe: NetworkNamespace) -> None:
    assert cluster.namespace is not None and cluster.state is not None
    inside = in_namespace(cluster.namespace, listening_ports)
    assert cluster.gcs_port in inside and cluster.dashboard_port in inside and len(inside) >= 8, inside
    bridged = {port for port in listening_ports() if answers("127.0.0.1", port)} & (inside | {cluster.dashboard_port})
    assert cluster.dashboard_port in bridged
    control = socket.create_server(("0.0.0.0", 0))  # a listener of this machine's that the network does reach
    control_port = control.getsockname()[1]
    try:
        reached = in_namespace(probe, lambda: {port for port in inside | bridged | {control_port}
                                               if answers(f"{PROBE_NET}.1", port)})  # fmt: skip
    finally:
        control.close()
    assert reached == {control_port}, f"cluster ports answering {PROBE_NET}.1 from another machine: {reached}"


def test_nothing_answers_on_loopback_without_the_token(cluster: LocalCluster) -> None:
    marker = cluster.root / "ran"
    job = {"entrypoint": f"touch {marker}", "submission_id": "unauthenticated"}
    assert httpx.post(f"{cluster.dashboard}/api/jobs/", json=job, timeout=30).status_code == 401
    assert httpx.get(f"{cluster.dashboard}/api/jobs/", timeout=30).status_code == 401
    assert httpx.get(f"{cluster.dashboard}/api/v0/nodes", timeout=30).status_code == 401
    wrong = {"Authorization": "Bearer " + "0" * 64}
    assert httpx.post(f"{cluster.dashboard}/api/jobs/", json=job, headers=wrong, timeout=30).status_code == 403
    token = {"Authorization": f"Bearer {cluster.token}"}
    assert httpx.get(f"{cluster.dashboard}/api/jobs/", headers=token, timeout=30).status_code == 200
    assert not marker.exists()
    # The nodes' own ports (GCS, raylets, agents with their job API, metrics) are not this machine's to reach: the
    # bridge opens the dashboard and the engines' range, nothing else.
    state = read_state(cluster.root)
    assert state is not None and state.bridge and cluster.engine_ports is not None
    listed = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout.splitlines()
    opened = {int(line.split()[3].rsplit(":", 1)[1]) for line in listed if f"pid={state.bridge[0]}," in line}
    low, high = cluster.engine_ports
    assert cluster.dashboard_port in opened and opened <= {cluster.dashboard_port, *range(low, high + 1)}, opened


def test_the_token_is_new_per_start_and_only_its_owner_reads_it(cluster: LocalCluster) -> None:
    assert cluster.token_file.stat().st_mode & 0o777 == 0o600
    state = read_state(cluster.root)
    assert state is not None and state.netns == cluster.namespace.name and running(int(state.bridge[0]))
