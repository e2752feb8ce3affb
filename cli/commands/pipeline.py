"""``recipe run | stage | audit | report``: the gated pipeline from the command line.

recipe run [--profile local] [--resume RUN] [--set KEY=VALUE ...] [--stop-after STAGE] [--runs-root runs]
    validates the profile (every bad field at once, before anything runs), then runs the ``pipeline`` flow: the
    seven stages in order, each gated; prints the stage table and the run folder. ``--resume RUN`` runs a run folder
    again, reusing every stage that passed with the same inputs (``--set`` or ``--profile`` change the config; the
    change is recorded in run.json). Exit 0 when every stage passed, 1 when a gate failed or a stage raised.
recipe stage NAME --run RUN [--runs-root runs]
    one stage flow on an existing run (the stages before it must have passed).
recipe audit RUN [--runs-root runs]
    the trail: per stage the status, attempt, timings, fingerprint, config hash, code version, gate criteria,
    findings and artifact paths.
recipe report RUN [--runs-root runs] [--out DIR]
    report.md + report.html (plots inlined) in the run folder, from its manifests and catalog.

Without PREFECT_API_URL the flows run against a temporary local Prefect server (about 20 s to start); with
``recipe server`` running, set PREFECT_API_URL to watch the run in the UI.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cli.args import RUNS_ROOT_HELP
from tasks.tracking.state import links as tracker_links

console = Console()
MIGRATE_TIMEOUT_S = 300.0
"""How long a run waits for another run's migration of the same Prefect database."""
STAGES = ("derisk", "tito", "systems", "overfit", "ablations", "hero", "transfer")
PROFILES = sorted(
    path.stem for path in (Path(__file__).resolve().parents[2] / "deployments" / "profiles").glob("*.yaml")
)


def print_stages(root: Path) -> None:
    from tasks.run_store import RunStore

    store = RunStore(root)
    table = Table(title=f"run {store.run_id}")
    for column in ("stage", "status", "seconds", "gate"):
        table.add_column(column)
    for m in store.manifests():
        gate = m.gate or {}
        failed = [c["name"] for c in gate.get("criteria", []) if not c["passed"]]
        summary = "; ".join(failed) if failed else (f"{len(gate.get('criteria', []))} criteria held" if gate else "")
        table.add_row(m.folder, m.status.value, f"{m.duration_s or 0:.0f}", summary or (m.error or "")[:80])
    console.print(table)
    console.print(f"run folder: {store.root.resolve()}  (recipe audit {store.run_id}; recipe report {store.run_id})")
    for name, where in tracker_links(store.root).items():
        console.print(f"tracker {name}: {where}")


def start_local_server() -> None:
    """Without PREFECT_API_URL every `recipe run` starts a temporary Prefect server on PREFECT_HOME's SQLite database.

    * Each server migrates the database as it starts: two runs started together on a new database raced their
      migrations ("duplicate column name") and one died before any work. Migrate once here, under a lock on
      PREFECT_HOME, so the servers find it current.
    * Prefect stops its server at exit, which a SIGKILL skips: the server ran on forever. Start it here (Prefect's own
      ``SubprocessASGIServer``, the instance its clients then use) and tether it to this process (``tasks.tether``).
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME

    if PREFECT_API_URL.value():
        return
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.server.database import provide_database_interface

    from envs.files import file_lock
    from tasks.tether import tether

    with file_lock(Path(PREFECT_HOME.value()) / ".rl-recipe-migrate.lock", timeout_s=MIGRATE_TIMEOUT_S):
        asyncio.run(provide_database_interface().create_db())
    server = SubprocessASGIServer()
    server.start()
    if server.server_process is not None:
        tether(server.server_process.pid)


def _run(args: argparse.Namespace) -> int:
    from flows.config import StageName, load_profile

    runs_root = args.runs_root
    if args.resume is None:
        # fail fast on a bad profile or override: flows.config alone is imported by now (~0.4 s), not Prefect
        config = load_profile(args.profile, args.set)
        if args.dry_run:
            from flows.dry_run import print_plan

            return 0 if print_plan(config) else 1
        from flows.preflight import preflight

        preflight(config)  # and on a profile that cannot run where its backends say (a cluster without an address)
        runs_root = runs_root or str(config.runs_root)
    runs_root = runs_root or "runs"
    from flows.pipeline import open_pipeline_run, pipeline

    store, _ = open_pipeline_run(  # claims the run: another process on it is refused here, in one line
        None if args.resume and not args.profile_given else args.profile, args.resume, args.set, Path(runs_root)
    )
    store.verify()  # a damaged run file fails here, in one line, before Prefect starts
    start_local_server()
    state = pipeline(
        profile=None,
        resume=str(store.root),
        stop_after=StageName(args.stop_after or StageName.TRANSFER).value,
        runs_root=runs_root,
        return_state=True,
    )
    print_stages(store.root)
    if not state.is_completed():
        console.print(f"[red]{state.message}[/red]")
        return 1
    return 0


def _stage(args: argparse.Namespace) -> int:
    from flows.config import StageName
    from flows.pipeline import STAGE_FLOWS
    from tasks.run_lock import claim
    from tasks.run_store import RunStore

    store = RunStore.open(Path(args.runs_root), args.run)
    store.verify()  # a damaged run file fails here, in one line, before Prefect starts
    claim(store.root, f"recipe stage {args.name}")  # another process on the run is refused here, in one line
    start_local_server()
    state = STAGE_FLOWS[StageName(args.name)](run=str(store.root), runs_root=args.runs_root, return_state=True)
    print_stages(store.root)
    return 0 if state.is_completed() else 1


def _audit(args: argparse.Namespace) -> int:
    from tasks.report import audit_lines
    from tasks.run_store import RunStore

    for line in audit_lines(RunStore.open(Path(args.runs_root), args.run)):
        print(line)
    return 0


def _report(args: argparse.Namespace) -> int:
    from tasks.report import write_report
    from tasks.run_store import RunStore

    files = write_report(RunStore.open(Path(args.runs_root), args.run), Path(args.out) if args.out else None)
    console.print(f"wrote {files.markdown} and {files.html}")
    return 0


class _ProfileAction(argparse.Action):
    """``--profile`` that remembers it was given (on resume, only a given profile replaces the stored config)."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        namespace.profile, namespace.profile_given = values, True


def register(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="run the gated pipeline end to end, or resume a run")
    run.add_argument(
        "--profile",
        default="local",
        action=_ProfileAction,
        help=f"a profile ({', '.join(PROFILES)}: deployments/profiles/) or a YAML path; smoke takes ~2 min (its first "
        "run also bootstraps its base, ~10 min on 2 cores), local is make demo (~20-45 min)",
    )
    run.add_argument("--resume", metavar="RUN", help="run id or folder to run again (passed stages are reused)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable")
    run.add_argument("--stop-after", choices=STAGES, help="stop after this stage (when it passed)")
    run.add_argument("--runs-root", help="folder of run folders (default: the profile's runs_root, runs/)")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print what each stage would run where (engines, jobs, paths); run nothing",
    )
    run.set_defaults(handler=_run, profile_given=False)

    stage = commands.add_parser("stage", help="run one stage of a run (the stages before it must have passed)")
    stage.add_argument("name", choices=STAGES, help="the stage to run")
    stage.add_argument("--run", required=True, help="run id or folder")
    stage.add_argument("--runs-root", default="runs", help=RUNS_ROOT_HELP)
    stage.set_defaults(handler=_stage)

    audit = commands.add_parser("audit", help="a run's trail: each stage's status, gate criteria, config, code version")
    audit.add_argument("run", help="run id or folder")
    audit.add_argument("--runs-root", default="runs", help=RUNS_ROOT_HELP)
    audit.set_defaults(handler=_audit)

    report = commands.add_parser("report", help="write a run's report.md and report.html (with its plots)")
    report.add_argument("run", help="run id or folder")
    report.add_argument("--runs-root", default="runs", help=RUNS_ROOT_HELP)
    report.add_argument("--out", help="folder for the report (default: the run folder)")
    report.set_defaults(handler=_report)
