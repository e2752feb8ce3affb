"""``recipe history | compare | prune``: operating many runs (issue 24, "Operating it"; docs/operations.md).

recipe history --profile local [--runs-root runs]
    the overfit gate over the profile's runs, oldest first: per run its code version, the overfit status, the reward
    before → after, the gain and the p-value; then "last passed at <commit> (run, date)" and "first failed at
    <commit> (run, date)" for the current failure streak (what the nightly alert says too). Writes nothing.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _history(args: argparse.Namespace) -> int:
    from tasks.history import failure_streak, overfit_history
    from tasks.report import history_table

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


def register(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser(
        "history", help="the overfit gate over a profile's runs, and the commits of its last pass and first failure"
    )
    history.add_argument("--profile", default="local", help="the profile whose runs are listed (its name in run.json)")
    history.add_argument("--runs-root", default="runs", help="the folder of run folders")
    history.set_defaults(handler=_history)
