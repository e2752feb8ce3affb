"""The process-wide reaper: every live sandbox is killed synchronously at interpreter exit or on SIGTERM / SIGHUP,
whatever else failed, so no gateway process or world copy outlives the process that started it.

Providers ``track`` a sandbox before its gateway starts and ``untrack`` it when it is closed; a ``SandboxPool``
installs the handlers as it is created.
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from envs.sandbox.base import Sandbox

log = logging.getLogger(__name__)


class Reaper:
    """Every live sandbox, killed synchronously at interpreter exit or on SIGTERM / SIGHUP, whatever else failed.

    ``install`` chains to the signal handlers already present (and only replaces the defaults in the main thread), so
    a host application keeps its own shutdown logic.
    """

    def __init__(self) -> None:
        self._live: set[Sandbox] = set()
        self._lock = threading.Lock()
        self._installed = False

    def track(self, sandbox: Sandbox) -> None:
        with self._lock:
            self._live.add(sandbox)
        self.install()

    def untrack(self, sandbox: Sandbox) -> None:
        with self._lock:
            self._live.discard(sandbox)

    def live(self) -> list[Sandbox]:
        with self._lock:
            return list(self._live)

    def reap(self) -> int:
        """Kill every tracked sandbox; returns how many there were."""
        with self._lock:
            doomed, self._live = list(self._live), set()
        for sandbox in doomed:
            try:
                sandbox.kill()
            except Exception as error:  # one failure must not spare the others
                log.warning("reaping sandbox %s: %s: %s", sandbox.world_root, type(error).__name__, error)
        return len(doomed)

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        atexit.register(self.reap)
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, self._handler(signal.getsignal(signum)))

    def _handler(self, previous: Any) -> Callable[[int, FrameType | None], None]:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.reap()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:  # the default action: die of the signal, as without us
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)

        return on_signal


REAPER = Reaper()
