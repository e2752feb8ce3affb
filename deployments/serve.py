"""The deployments of rl-recipe, served from one process (``recipe serve``).

* ``pipeline`` — the seven gated stages; its form in the UI: profile, run to resume, typed changes (steps, bars,
  learning rate, engine URL), any other override, the stage to stop after;
* one deployment per stage (``derisk`` … ``transfer``) — that stage on an existing run (``run``: its id or folder);
* ``nightly-overfit-gate`` — the overfit gate of the latest landed config against the current code, on the profile's
  cron (``schedule.nightly_cron`` in ``schedule.timezone``, default 02:00 UTC); a failure alerts the profile's webhook.

``recipe serve`` also creates the global concurrency limit ``gpu`` when it is missing. The same deployments for a
process work pool are in ``deployments/prefect.yaml`` (``prefect deploy --all`` + ``prefect worker start``).

    recipe serve --profile local          # needs a Prefect API: `recipe server` in another shell

Ctrl-C (SIGINT) or SIGTERM stops it; flow runs it started keep going. Started in the background by a script (which
starts it with SIGINT ignored), ``kill -INT`` still stops it. When the server stops first, it stops too, in one line
that says so (Prefect's runner died on its third failed poll with pages of tracebacks; a dropped websocket added one).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import httpx
from prefect import serve
from prefect.client.schemas.schedules import CronSchedule
from prefect.deployments.runner import RunnerDeployment

from flows.config import load_profile
from flows.nightly import nightly_overfit
from flows.pipeline import STAGE_FLOWS, pipeline
from tasks.concurrency import ensure_gpu_limit

TAGS = ["rl-recipe"]


def deployments(profile: str = "local", cron: str | None = None, timezone: str | None = None) -> list[RunnerDeployment]:
    """Every deployment, defaults set to ``profile``; the nightly gate on ``cron`` (default: the profile's)."""
    schedule = load_profile(profile).schedule
    nightly = CronSchedule(cron=cron or schedule.nightly_cron, timezone=timezone or schedule.timezone)
    built = [
        pipeline.to_deployment(
            name="pipeline",
            parameters={"profile": profile},
            description="The recipe's seven gated stages end to end (or resumed); stops at the first failed gate.",
            tags=TAGS,
        ),
        nightly_overfit.to_deployment(
            name="nightly-overfit-gate",
            parameters={"profile": profile},
            schedules=[nightly],
            description="Nightly: the overfit gate of the latest landed config against the current code.",
            tags=[*TAGS, "nightly"],
        ),
    ]
    built += [
        stage_flow.to_deployment(
            name=stage.value,
            description=f"Stage {stage.index} ({stage.value}) on an existing run: give its run id or folder.",
            tags=[*TAGS, "stage"],
        )
        for stage, stage_flow in STAGE_FLOWS.items()
    ]
    return built


SERVER_CHECK_S, SERVER_MISSES = 2.0, 3
"""How often the server's health is checked, and how many misses in a row mean it is gone (Prefect's own poller
gives up after three failed polls, ≥ 20 s apart: this notices first and stops cleanly)."""
OBSERVER_LOGGER = "prefect.FlowRunCancellingObserver"
"""The runner's cancellation listener: logs a traceback when the server closes its websocket, then polls."""


class OneLineWhenTheServerGoes(logging.Filter):
    """Drops the traceback from the listener's "websocket failed" warning and says what happens instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is not None and record.levelno == logging.WARNING:
            error = record.exc_info[1]
            record.msg, record.args = "the Prefect server went away (%s); polling until it is back", (error,)
            record.exc_info, record.exc_text = None, None
        return True


class ServerWatch(threading.Thread):
    """Interrupts this process (SIGINT: the runner's clean shutdown) once the API at ``api_url`` has missed
    ``SERVER_MISSES`` health checks in a row; ``gone`` says it did."""

    def __init__(self, api_url: str) -> None:
        super().__init__(name="server-watch", daemon=True)
        self.api_url, self.gone, self.done = api_url.rstrip("/"), False, threading.Event()

    def run(self) -> None:
        misses = 0
        while not self.done.wait(SERVER_CHECK_S):
            try:
                answered = httpx.get(f"{self.api_url}/health", timeout=SERVER_CHECK_S).status_code == 200
            except httpx.HTTPError:
                answered = False
            misses = 0 if answered else misses + 1
            if misses >= SERVER_MISSES:
                self.gone = True
                os.kill(os.getpid(), signal.SIGINT)
                return


def serve_all(profile: str = "local", cron: str | None = None, timezone: str | None = None) -> int:
    """Serve every deployment from this process until interrupted (runs keep going when it stops: no pause), or until
    the server stops answering (exit status 1, one line)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # inherited SIG_IGN from a backgrounding shell
    logging.getLogger(OBSERVER_LOGGER).addFilter(OneLineWhenTheServerGoes())
    ensure_gpu_limit()
    watch = ServerWatch(os.environ["PREFECT_API_URL"])
    watch.start()
    try:
        serve(*deployments(profile, cron, timezone), pause_on_shutdown=False)
    finally:
        watch.done.set()
    if watch.gone:
        print(
            f"recipe serve: the Prefect server at {watch.api_url} stopped answering, so serving stopped (flow runs it "
            "started keep going); start `recipe server`, then `recipe serve` again",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="recipe serve", description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local", help="the profile the deployments default to")
    parser.add_argument("--nightly-cron", help="cron of the nightly overfit gate (default: the profile's, 0 2 * * *)")
    parser.add_argument("--timezone", help="time zone of the cron (default: the profile's, UTC)")
    args = parser.parse_args(argv)
    return serve_all(args.profile, args.nightly_cron, args.timezone)


if __name__ == "__main__":
    sys.exit(main())
