"""``recipe tracking``: the experiment trackers a run also reports to (``tasks.tracking``; docs/tracking.md).

recipe tracking up [--port 5000] [--root .tracking]
    starts a local MLflow tracking server on 127.0.0.1 (runs in ROOT/mlflow.db, artifacts in ROOT/artifacts, its log
    in ROOT/server.log), detached; prints its URL and the ``--set`` that sends a run there. Returns once it answers.
recipe tracking down [--root .tracking]
    stops the server ``up`` started under ROOT (and nothing else).
recipe tracking publish RUN [--runs-root runs] [--backend NAME ...] [--mlflow-uri URL]
    sends the run's ended stages its trackers have not taken yet (a tracker that was down during the run catches up;
    ``--backend`` adds backends the profile did not name); prints each tracker's link. Exit 1 when a tracker failed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.args import RUNS_ROOT_HELP, listen_port

DEFAULT_ROOT = Path(".tracking")


def _up(args: argparse.Namespace) -> int:
    from tasks.tracking.server import start_server

    state = start_server(Path(args.root), args.port)
    print(f"MLflow tracking server: {state.url} (log: {Path(args.root) / 'server.log'})")
    where = f"--set tracking.backends=[mlflow] --set tracking.mlflow_uri={state.url}"
    print(f"send a run there: recipe run --profile smoke {where}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from tasks.tracking.server import stop_server

    print("stopped" if stop_server(Path(args.root)) else f"no tracking server running under {args.root}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    from flows.stage import open_run
    from tasks.tracking import TrackerName
    from tasks.tracking.publish import behind, publish_run

    store, config = open_run(args.run, Path(args.runs_root))
    settings = config.tracking
    backends = tuple(dict.fromkeys([*settings.backends, *(TrackerName(name) for name in args.backend)]))
    updates = {"backends": backends} | ({"mlflow_uri": args.mlflow_uri} if args.mlflow_uri else {})
    settings = settings.model_copy(update=updates)
    if not backends:
        print(f"run {store.run_id} names no tracker: pass --backend {{{','.join(TrackerName)}}}")
        return 2
    links = publish_run(store, settings)
    missing = behind(store, backends)
    for name in backends:
        print(f"{name}: {'FAILED (see the warning above)' if name in missing else links.get(name, '')}")
    return 1 if missing else 0


def register(commands: argparse._SubParsersAction) -> None:
    from tasks.tracking.contract import TrackerName

    tracking = commands.add_parser("tracking", help="experiment trackers: a local MLflow server, publishing a run")
    sub = tracking.add_subparsers(dest="tracking_command", required=True, help="what to do")
    up = sub.add_parser("up", help="start a local MLflow tracking server on 127.0.0.1")
    up.add_argument("--port", type=listen_port, default=5000, help="the port it listens on")
    up.add_argument("--root", default=str(DEFAULT_ROOT), help="its store, artifacts and log")
    up.set_defaults(handler=_up)
    down = sub.add_parser("down", help="stop the server `up` started")
    down.add_argument("--root", default=str(DEFAULT_ROOT), help="the folder `up` was given")
    down.set_defaults(handler=_down)
    publish = sub.add_parser("publish", help="send a run's stages its trackers have not taken yet")
    publish.add_argument("run", metavar="RUN", help="the run (id or folder)")
    publish.add_argument("--runs-root", default="runs", help=RUNS_ROOT_HELP)
    publish.add_argument(
        "--backend", action="append", default=[], choices=list(TrackerName), help="a tracker to add (repeatable)"
    )
    publish.add_argument("--mlflow-uri", help="the MLflow server (default: the run's tracking.mlflow_uri)")
    publish.set_defaults(handler=_publish)
