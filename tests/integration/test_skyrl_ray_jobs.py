"""The SkyRL submission path end to end against a real local Ray head (CPU): ``recipe cluster submit --dry-run`` uploads
the repository, runs the dry-run entry point as a Ray Job, streams its log, and appends the train steps read from its
metric blocks to a catalog; a broken override set ends as a FAILED job.

The Jobs API needs Ray's dashboard, which needs ``ray[default]`` (part of the ``cluster`` extra); without it the test
skips. The head runs with its own temp dir and ports, in its own process group, and is stopped by process id (not
``ray stop``, which would stop every Ray instance on the machine):

    .venv/bin/python -m pytest -m integration tests/integration/test_skyrl_ray_jobs.py
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cli.main import main
from envs.net import free_port
from tasks.catalog import Catalog
from trainer.skyrl.submit import submit_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
START_TIMEOUT_S = 240.0
JOB_TIMEOUT_S = 300.0


def _dashboard_ready(address: str) -> bool:
    try:
        return httpx.get(f"{address}/api/version", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _our_pids(marker: str) -> list[int]:
    """Processes whose command line names our head's temp dir (only ours do)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _stop_head(head: subprocess.Popen, marker: str) -> None:
    head.send_signal(signal.SIGTERM)  # `ray start --block` stops the processes it started
    try:
        head.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _our_pids(marker) and time.monotonic() < deadline:
        time.sleep(1)
    for pid in _our_pids(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    try:
        importlib.import_module("ray.dashboard.optional_deps")
    except ImportError as error:
        pytest.skip(f"the Ray Jobs API needs the dashboard: pip install 'ray[default]' (the cluster extra); {error}")
    temp = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths live under it
    port, dashboard_port = free_port(), free_port()
    env = os.environ | {
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    os.environ["RAY_AUTH_MODE"] = "disabled"  # the client side too
    argv = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
            f"--dashboard-port={dashboard_port}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
            "--node-ip-address=127.0.0.1", "--num-cpus=1", f"--temp-dir={temp}", "--disable-usage-stats"]  # fmt: skip
    with Path(temp, "head.log").open("w") as log:
        head = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://127.0.0.1:{dashboard_port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _dashboard_ready(address):
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray head did not start ({head.poll()=}):\n{Path(temp, 'head.log').read_text()[-3000:]}")
            time.sleep(2)
        yield address
    finally:
        _stop_head(head, temp)
        shutil.rmtree(temp, ignore_errors=True)


def test_dry_run_job_streams_and_its_steps_reach_the_catalog(ray_head: str, tmp_path: Path, capsys) -> None:
    catalog_path = tmp_path / "catalog.duckdb"
    argv = ["cluster", "submit", "--profile", "qwen36-35b", "--address", ray_head, "--dry-run", "--python",
            sys.executable, "--timeout", str(JOB_TIMEOUT_S), "--catalog", str(catalog_path)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "[dry run] overrides valid: 103 keys" in out and "policy_loss_type: dppo" in out  # streamed
    assert ": SUCCEEDED; 2 train steps read from its metrics" in out
    rows = Catalog(catalog_path).query("SELECT stage, run, step, trajectories, trained FROM train_steps ORDER BY step")
    run = "qwen36-35b-hero-dppo_prompt_mean_nudge-dryrun"
    assert rows == [
        {"stage": "hero", "run": run, "step": 1, "trajectories": 256, "trained": False},
        {"stage": "hero", "run": run, "step": 2, "trajectories": 256, "trained": False},
    ]


def test_a_broken_override_set_fails_the_job(ray_head: str) -> None:
    outcome = submit_job(
        ray_head, ["trainer.fully_async.enabled=true"], python=sys.executable, timeout_s=JOB_TIMEOUT_S, run="broken"
    )
    assert outcome.status == "FAILED" and "[dry run] invalid:" in outcome.logs and outcome.rows == []
