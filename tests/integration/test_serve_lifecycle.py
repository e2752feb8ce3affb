"""Stopping what a newcomer started: `recipe serve` started the way a script backgrounds it (SIGINT ignored) stops on
SIGINT (Ctrl-C) and on SIGTERM with status 0; its server stopped first, it stops by itself with status 1 and one line
saying why — no traceback in either case. Real processes: `recipe server` and `recipe serve`."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
SERVING = "Your deployments are being served"


def ignore_sigint() -> None:
    """What `cmd &` in a non-interactive shell does to the job it starts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "the server stops"])
def test_a_backgrounded_serve_stops_cleanly_on_a_signal_or_when_its_server_goes(stop, ops, tmp_path) -> None:
    log, home = tmp_path / "serve.log", tmp_path / "prefect"
    home.mkdir()
    with ops.server_process(home) as (server, env), log.open("w") as out:
        serve = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve", "--profile", "smoke"],
            env=env, cwd=REPO, stdout=out, stderr=out, preexec_fn=ignore_sigint,
        )  # fmt: skip
        try:
            ops.wait_for(lambda: SERVING in log.read_text(), 180, "recipe serve")
            if stop == "the server stops":
                ops.stop_tree(server)
            else:
                serve.send_signal(signal.Signals[stop])
            status = serve.wait(timeout=90)
        finally:
            ops.stop_tree(serve)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    if stop == "the server stops":
        assert status == 1
        assert f"recipe serve: the Prefect server at {env['PREFECT_API_URL']} stopped answering" in text
    else:
        assert status == 0 and ("shutting down" in text or "graceful shutdown" in text)
