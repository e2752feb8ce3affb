"""Red-team finding 8 (docs/reliability.md): a killed run left things behind — its temporary Prefect server ran on
forever after a SIGKILL of ``recipe run`` (3 of 3), and a kill during the environment build left
``data/.env-<key>.building-*`` that no later build removed. Now the server is tethered to the run's process, and the
next build sweeps the staging folders of killed ones under the data root's lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from envs.build import build_key, environment_build
from tests.processes import running

REPO = Path(__file__).resolve().parents[2]


def test_the_temporary_server_dies_with_a_sigkilled_run(tmp_path: Path) -> None:
    """What ``recipe run`` does first, then a SIGKILL: the server it started is gone within seconds."""
    code = textwrap.dedent(
        """
        import time
        from cli.commands.pipeline import start_local_server
        from prefect.server.api.server import SubprocessASGIServer
        start_local_server()
        print(SubprocessASGIServer().server_process.pid, flush=True)
        time.sleep(600)
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | {"PREFECT_HOME": str(tmp_path / "home")}
    run = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    server = int(run.stdout.readline())
    assert running(server)
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    deadline = time.monotonic() + 30
    while running(server) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not running(server)


def test_a_killed_builds_staging_folder_is_swept_by_the_next_build(tmp_path: Path) -> None:
    root = tmp_path / "data"
    build = (
        f"from pathlib import Path; from envs.build import environment_build; environment_build(Path({str(root)!r}))"
    )
    killed = subprocess.Popen([sys.executable, "-c", build], cwd=REPO)  # killed midway: its staging folder stays
    staging = f".env-{build_key(0, 3)}.building-"
    deadline = time.monotonic() + 120
    while not list(root.glob(staging + "*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    assert list(root.glob(staging + "*")), "the build was not caught midway"
    build = environment_build(root)
    assert build.name == f"env-{build_key(0, 3)}" and not list(root.glob(".env-*.building-*"))
