"""An engine server this process owns, with a stand-in for vLLM (a child that serves /health on the Unix socket its
gate names, as vLLM's ``--uds``, and starts a grandchild, as vLLM's API server starts its engine core): it starts when
healthy, stops whole, and never outlives its owner — not even an owner killed with SIGKILL, whose direct children Ray
would kill too. Real vLLM: the cluster tests."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envs.net import free_port
from envs.tokens import ensure_token_file
from tests.processes import running
from trainer.vllm.launch import VllmServeSpec
from trainer.vllm.server import EngineStartError, VllmServer

REPO = Path(__file__).resolve().parents[2]
FAKE = textwrap.dedent(
    """
    import http.server, socketserver, subprocess, sys, pathlib
    core = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pathlib.Path(sys.argv[1]).write_text(str(core.pid))
    class Health(http.server.BaseHTTPRequestHandler):
        def address_string(self): return "uds"
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404); self.end_headers()
        def log_message(self, *args): pass
    assert sys.argv[2] == "--uds"
    socketserver.UnixStreamServer(sys.argv[3], Health).serve_forever()
    """
)


def fake_spec(tmp_path: Path, script: str = FAKE) -> tuple[VllmServeSpec, Path]:
    port, core, token = free_port(), tmp_path / "core.pid", tmp_path / "token"
    ensure_token_file(token)
    argv = [sys.executable, "-c", script, str(core)]
    return VllmServeSpec(argv, {}, "127.0.0.1", port, "policy", token), core


def test_a_server_starts_healthy_and_stops_whole(tmp_path: Path) -> None:
    spec, core = fake_spec(tmp_path)
    with VllmServer(spec, tmp_path / "engine.log", start_timeout_s=60) as server:
        assert server.alive() and server.start_s is not None and running(int(core.read_text()))
    assert not server.alive() and not running(int(core.read_text()))


def test_the_server_dies_with_its_owner_even_one_killed_with_sigkill(tmp_path: Path) -> None:
    spec, core = fake_spec(tmp_path)
    owner = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from trainer.vllm.launch import VllmServeSpec
        from trainer.vllm.server import VllmServer
        spec = VllmServeSpec({spec.argv!r}, {{}}, "127.0.0.1", {spec.port}, "policy", Path({str(spec.token_file)!r}))
        server = VllmServer(spec, Path({str(tmp_path / "engine.log")!r}))
        server.start()
        print("up", flush=True)
        time.sleep(600)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", owner], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "up"
    grandchild = int(core.read_text())
    os.kill(process.pid, signal.SIGKILL)  # no clean-up runs in the owner
    process.wait(timeout=30)
    deadline = time.monotonic() + 30
    while running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not running(grandchild)


def test_a_server_that_exits_or_never_answers_is_an_error_with_its_log(tmp_path: Path) -> None:
    crashing, _ = fake_spec(tmp_path, "import sys; print('no such model'); sys.exit(3)")
    with pytest.raises(EngineStartError, match=r"(?s)exited while starting.*no such model"):
        VllmServer(crashing, tmp_path / "crash.log", start_timeout_s=60).start()
    silent, _ = fake_spec(tmp_path, "import time; print('loading'); time.sleep(600)")
    server = VllmServer(silent, tmp_path / "silent.log", start_timeout_s=3)
    with pytest.raises(EngineStartError, match=r"(?s)did not answer /health within 3 s.*loading"):
        server.start()
    assert not server.alive()
