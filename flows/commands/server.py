"""``recipe server`` and ``recipe serve``: the Prefect server and the deployments, for operating from the UI.

recipe server [--port 4200]
    a local Prefect server (SQLite under the project's PREFECT_HOME, .prefect/), UI and API on 127.0.0.1 only;
    prints the UI address and the PREFECT_API_URL to export in other shells.
recipe serve [--profile local] [--nightly-cron "0 2 * * *"] [--timezone UTC]
    serves, from one process, the pipeline, each stage and the nightly overfit gate (deployments/serve.py) against
    the server in PREFECT_API_URL; creates the global concurrency limit ``gpu`` when missing.

Both replace this process with theirs (``exec``): the CLI lives in ``flows`` and must not import ``deployments``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from envs.errors import RecipeError
from envs.net import LOOPBACK
from flows.args import port


class ServerError(RecipeError):
    """The Prefect server or the deployments cannot be started as asked."""


def _server(args: argparse.Namespace) -> int:
    prefect = shutil.which("prefect", path=os.path.dirname(sys.executable)) or shutil.which("prefect")
    if prefect is None:
        raise ServerError("the prefect command is not installed in this environment (make install)")
    url = f"http://{LOOPBACK}:{args.port}"
    print(f"Prefect UI: {url}   (in other shells: export PREFECT_API_URL={url}/api)", flush=True)
    print(f"database: {os.environ['PREFECT_HOME']}", flush=True)
    os.execv(prefect, [prefect, "server", "start", "--host", LOOPBACK, "--port", str(args.port)])
    return 0  # not reached: execv replaced this process


def _serve(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        raise ServerError(
            "recipe serve needs a Prefect server: start one with `recipe server` and "
            "export PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    argv = [sys.executable, "-m", "deployments.serve", "--profile", args.profile]
    argv += ["--nightly-cron", args.nightly_cron] if args.nightly_cron else []
    argv += ["--timezone", args.timezone] if args.timezone else []
    os.execv(sys.executable, argv)
    return 0  # not reached


def register(commands: argparse._SubParsersAction) -> None:
    server = commands.add_parser("server", help="a local Prefect server (UI + API on 127.0.0.1)")
    server.add_argument("--port", type=port, default=4200)
    server.set_defaults(handler=_server)

    serve = commands.add_parser("serve", help="serve the pipeline, stage and nightly deployments")
    serve.add_argument("--profile", default="local", help="the profile the deployments default to")
    serve.add_argument("--nightly-cron", help='cron of the nightly overfit gate (default: the profile\'s "0 2 * * *")')
    serve.add_argument("--timezone", help="time zone of the cron (default: the profile's, UTC)")
    serve.set_defaults(handler=_serve)
