"""One vLLM engine as a process this one owns: started behind ``guard`` (a keeper detached from this process that
ends the server when this process is gone) and its ``gate`` (the only listener, which wants the run's token),
health-checked until it serves, stopped with its whole process group.

    spec = vllm_serve_spec(model, tensor_parallel=1, max_model_len=1024, device=Device.CPU, port=port,
                           token_file=root / "token")
    with VllmServer(spec, log_path=Path("engine.log")) as server:
        server.base_url                      # http://127.0.0.1:PORT, answering /health to the token's holder

Start-up is bounded (``start_timeout_s``): a server that exits or does not answer ``/health`` in time raises
``EngineStartError`` with the tail of its log — the usual causes (a missing interpreter, a model folder the node cannot
read, a port taken) are in its last lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from envs.errors import RecipeError
from envs.tokens import read_token_file
from trainer.vllm.guard import start_time
from trainer.vllm.launch import VllmServeSpec

START_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 30.0
LAUNCH_TIMEOUT_S = 60.0
HEALTH_TIMEOUT_S = 5.0
LOG_TAIL_CHARS = 3000


class EngineStartError(RecipeError, RuntimeError):
    """An engine server exited or did not become healthy in time; the message carries its log's tail."""


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def healthy(base_url: str, token: str | None = None, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
    """``GET /health`` (with ``token``, as a gated engine wants) answered 200 within ``timeout_s``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return httpx.get(f"{base_url}/health", headers=headers, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


class VllmServer:
    """A vLLM server process (see the module docstring); use as a context manager or call ``start`` / ``stop``."""

    def __init__(self, spec: VllmServeSpec, log_path: Path, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self.spec, self.log_path, self.start_timeout_s = spec, log_path, start_timeout_s
        self._guard: tuple[int, str | None] | None = None  # the guard's pid and start time
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    def start(self) -> None:
        if self.spec.token_file is None:
            raise EngineStartError("an engine needs the run's token file (VllmServeSpec.token_file): its gate wants it")
        token = read_token_file(self.spec.token_file)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        pidfile = self.log_path.with_suffix(".guard")
        pidfile.unlink(missing_ok=True)
        guard = [sys.executable, "-m", "trainer.vllm.guard", str(os.getpid()), str(pidfile), "--"]
        command = [*guard, *self.spec.launch_argv(sys.executable)]
        tick = time.monotonic()
        with self.log_path.open("ab") as log:
            try:
                env = os.environ | self.spec.env
                launcher = subprocess.run(
                    command, stdout=log, stderr=subprocess.STDOUT, env=env, timeout=LAUNCH_TIMEOUT_S
                )
            except (OSError, subprocess.TimeoutExpired) as error:
                raise EngineStartError(f"cannot start the engine ({self.spec.argv[0]}): {error}") from None
        if launcher.returncode != 0 or not pidfile.is_file():
            raise EngineStartError(f"the engine's guard did not start; its log ends:\n{log_tail(self.log_path)}")
        pid = int(pidfile.read_text())
        self._guard = (pid, start_time(pid))
        while not healthy(self.base_url, token):
            if not self.alive():
                self._guard = None
                raise EngineStartError(
                    f"the engine on {self.base_url} exited while starting; its log ends:\n{log_tail(self.log_path)}"
                )
            if time.monotonic() - tick > self.start_timeout_s:
                self.stop()
                raise EngineStartError(
                    f"the engine on {self.base_url} did not answer /health within {self.start_timeout_s:g} s; "
                    f"its log ends:\n{log_tail(self.log_path)}"
                )
            time.sleep(1.0)
        self.start_s = round(time.monotonic() - tick, 1)

    def alive(self) -> bool:
        return self._guard is not None and start_time(self._guard[0]) == self._guard[1]

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the guard's group (the guard stops the server), SIGKILL the group if the guard lingers."""
        if self._guard is None:
            return
        pid = self._guard[0]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                break
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
        self._guard = None

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
