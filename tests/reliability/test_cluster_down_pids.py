"""Red-team finding 9 (docs/reliability.md): ``recipe cluster down`` killed the process groups of the pids in
``cluster.json`` without checking they were still the cluster's — after a reboot it would kill whatever reused them.
A pid is signalled only while its start time is the one recorded for it."""

from __future__ import annotations

import subprocess
from dataclasses import asdict
from pathlib import Path

from envs.files import atomic_write_json
from envs.scratch import owner_tag
from tests.processes import running
from trainer.cluster.local_cluster import STATE_FILE, ClusterState, LocalCluster


def test_a_pid_reused_by_another_process_is_left_alone(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "120"], start_new_session=True)  # took a node's pid after a reboot
    pid = bystander.pid
    try:
        earlier = f"{pid}-{int(owner_tag(pid).split('-')[1]) - 1}"  # the node that had the pid started before it
        state = ClusterState(
            "http://127.0.0.1:1", "127.0.0.1:2", str(tmp_path / "gone"), [pid], ["node-0.log"], [earlier]
        )
        atomic_write_json(tmp_path / STATE_FILE, asdict(state))
        LocalCluster(tmp_path, dashboard_port=1, gcs_port=2, workers=[]).stop(timeout_s=1)
        assert running(pid) and not (tmp_path / STATE_FILE).exists()
        legacy = ClusterState("http://127.0.0.1:1", "127.0.0.1:2", str(tmp_path / "gone"), [pid], ["node-0.log"])
        atomic_write_json(tmp_path / STATE_FILE, asdict(legacy))  # written before start times were recorded
        LocalCluster(tmp_path, dashboard_port=1, gcs_port=2, workers=[]).stop(timeout_s=1)
        assert running(pid)  # not a Ray process: not ours
    finally:
        bystander.kill()
        bystander.wait(timeout=30)
