"""``recipe history | compare | prune``: operating many runs (issue 24, "Operating it"; docs/operations.md).

recipe history --profile local [--runs-root runs]
    the overfit gate over the profile's runs, oldest first: per run its code version, the overfit status, the reward
    before → after, the gain and the p-value; then "last passed at <commit> (run, date)" and "first failed at
    <commit> (run, date)" for the current failure streak (what the nightly alert says too). Writes nothing.
recipe compare A B [--runs-root runs] [--out DIR]
    two runs side by side in compare.md and a self-contained compare.html: the stage table, every gate criterion
    measured in A and B with its verdict, the metrics by stage with B − A, the ablation / transfer tables, and the
    training curves of both overlaid per stage. DIR defaults to <runs root>/compare/<A>-vs-<B> (inside neither run;
    the same command replaces it whole). Prints the path of compare.html.
recipe prune [--keep-last 3] [--profile P] [--runs-root runs] [--dry-run]
    deletes the checkpoint folders of every run but the newest N of each profile (or of P), keeping what any run
    records a path to (the final policies of the overfit and hero stages), manifests, gate reports, plots and
    catalogs; never touches a run with a stage running. Records each prune in the run's pruned.json (recipe audit
    shows it) and prints what it freed per run; --dry-run prints what it would free and changes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.args import RUNS_ROOT_HELP, non_negative_int


def _history(args: argparse.Namespace) -> int:
    from tasks.history import failure_streak, overfit_history
    from tasks.report import history_table

    if args.profile is None:
        args.profile = "local"
        print("profile local (pass --profile NAME for another)")
    nights = overfit_history(Path(args.runs_root), args.profile)
    if not nights:
        print(f"no run of profile {args.profile} under {args.runs_root} has an overfit stage yet")
        return 0
    print(f"the overfit gate over the runs of {args.profile} (oldest first)\n")
    print(history_table(nights).markdown())
    print()
    for line in failure_streak(nights).lines():
        print(line)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from tasks.explorer.comparison import default_out, summary_tables, write_comparison
    from tasks.run_store import RunStore

    runs_root = Path(args.runs_root)
    a, b = RunStore.open(runs_root, args.a), RunStore.open(runs_root, args.b)
    print(f"A: {a.run_id}\nB: {b.run_id}\n")
    for heading, table in summary_tables(a, b):
        print(f"## {heading}\n\n{table.markdown()}\n")
    files = write_comparison(a, b, Path(args.out) if args.out else default_out(runs_root, a, b))
    print(f"wrote {files.html} and {files.markdown.name} beside it (every table, the curves)")
    return 0


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


def _prune(args: argparse.Namespace) -> int:
    from tasks.prune import prune_runs

    runs, kept = prune_runs(Path(args.runs_root), args.keep_last, args.profile, args.dry_run)
    if not runs and not kept:
        print(f"no run{' of profile ' + args.profile if args.profile else ''} under {args.runs_root}")
        return 0
    verb = "would free" if args.dry_run else "freed"
    for profile, run_ids in kept.items():
        print(f"{profile}: the newest {len(run_ids)} run(s) kept whole: {', '.join(run_ids) or '–'}")
    for run in runs:
        if run.skipped:
            print(f"{run.run_id}: skipped: {run.skipped}")
        elif not run.removed:
            print(f"{run.run_id}: no checkpoint to prune")
        else:
            print(f"{run.run_id}: {verb} {_size(run.freed)} in {len(run.removed)} checkpoint folder(s)")
            for folder in run.removed:
                print(f"    {folder.path}  {_size(folder.bytes)}")
    total = sum(run.freed for run in runs)
    print(f"{verb} {_size(total)} in all" + ("  (dry run: nothing changed)" if args.dry_run else ""))
    return 0


def register(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser(
        "history", help="the overfit gate over a profile's runs, and the commits of its last pass and first failure"
    )
    history.add_argument("--profile", help="the profile whose runs are listed (its name in run.json; default: local)")
    history.add_argument("--runs-root", default="runs", help="the folder of run folders")
    history.set_defaults(handler=_history)

    compare = commands.add_parser(
        "compare", help="two runs side by side: gates, metrics, ablation/transfer tables, training curves"
    )
    compare.add_argument("a", metavar="A", help="the first run (id or folder): the A columns")
    compare.add_argument("b", metavar="B", help="the second run (id or folder): the B columns")
    compare.add_argument("--runs-root", default="runs", help=RUNS_ROOT_HELP)
    compare.add_argument("--out", help="folder for compare.md and compare.html (default: RUNS_ROOT/compare/A-vs-B)")
    compare.set_defaults(handler=_compare)

    prune = commands.add_parser(
        "prune", help="delete old runs' checkpoints, keeping their manifests, gate reports and catalogs"
    )
    prune.add_argument(
        "--keep-last",
        metavar="N",
        type=non_negative_int,
        default=3,
        help="the newest N runs of each profile are kept whole",
    )
    prune.add_argument("--profile", help="prune only this profile's runs (default: every profile's)")
    prune.add_argument("--runs-root", default="runs", help="the folder of run folders")
    prune.add_argument("--dry-run", action="store_true", help="print what would be deleted and freed; delete nothing")
    prune.set_defaults(handler=_prune)
