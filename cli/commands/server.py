"""``recipe server`` and ``recipe serve``: the Prefect server and the deployments, for operating from the UI.

recipe server [--port 4200]
    a local Prefect server (SQLite under the project's PREFECT_HOME, .prefect/), UI and API on 127.0.0.1 only;
    prints the UI address and the PREFECT_API_URL to export in other shells. The UI calls the API on the same port
    (PREFECT_UI_API_URL, unless set: Prefect's default is PREFECT_API_URL, else port 4200 whatever --port says).
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
from collections.abc import Mapping

from cli.args import listen_port
from envs.errors import RecipeError
from envs.net import LOOPBACK

UI_API_URL_NAMES = ("PREFECT_SERVER_UI_API_URL", "PREFECT_UI_API_URL")  # Prefect reads the first one set


class ServerError(RecipeError):
    """The Prefect server or the deployments cannot be started as asked."""


def server_environment(environ: Mapping[str, str], host: str, port: int) -> dict[str, str]:
    """``environ`` for a Prefect server on ``host:port`` whose UI calls that same server's API.

    ``prefect server start --port N`` serves on N, but its UI's API address comes from PREFECT_UI_API_URL, else
    PREFECT_API_URL, else PREFECT_SERVER_API_PORT (4200): on any other port the pages would call a server that is not
    there. Both are set here unless the user set them (a proxy in front of the UI, say); empty counts as unset."""
    api = f"http://{host}:{port}/api"
    env = dict(environ)
    if not any(env.get(name) for name in UI_API_URL_NAMES):
        env["PREFECT_UI_API_URL"] = api
    if not env.get("PREFECT_API_URL"):
        env["PREFECT_API_URL"] = api
    return env


def _server(args: argparse.Namespace) -> int:
    prefect = shutil.which("prefect", path=os.path.dirname(sys.executable)) or shutil.which("prefect")
    if prefect is None:
        raise ServerError("the prefect command is not installed in this environment (make install)")
    env = server_environment(os.environ, LOOPBACK, args.port)
    url = f"http://{LOOPBACK}:{args.port}"
    print(f"Prefect UI: {url}   (in other shells: export PREFECT_API_URL={url}/api)", flush=True)
    ui_api = next(env[name] for name in UI_API_URL_NAMES if env.get(name))
    if ui_api != f"{url}/api":
        print(f"note: the UI calls the API at {ui_api} (set in the environment), not at {url}/api", flush=True)
    print(f"database: {env['PREFECT_HOME']}", flush=True)
    os.execve(prefect, [prefect, "server", "start", "--host", LOOPBACK, "--port", str(args.port)], env)
    return 0  # not reached: execve replaced this process


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
    server = commands.add_parser("server", help="a local Prefect server: the UI and its API on 127.0.0.1")
    server.add_argument("--port", type=listen_port, default=4200, help="the port of the UI and the API")
    server.set_defaults(handler=_server)

    serve = commands.add_parser("serve", help="serve the pipeline, stage and nightly deployments to `recipe server`")
    serve.add_argument("--profile", default="local", help="the profile the deployments default to")
    serve.add_argument("--nightly-cron", help='cron of the nightly overfit gate (default: the profile\'s "0 2 * * *")')
    serve.add_argument("--timezone", help="time zone of the cron (default: the profile's, UTC)")
    serve.set_defaults(handler=_serve)
