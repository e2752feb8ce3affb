"""The code-only harness's per-call cost: each app call a model makes there is a bash line that starts an interpreter
for `python -m envs.apps TOOL ARGS --world DIR`. Seconds per call of read-only operations of four apps, the CLI as it
runs (only the called app's module and file library load) against the same call with every app loaded first (what
each call cost before apps loaded on first need); the ratio is all-apps / as-run. Median of `--calls` interleaved calls.

    .venv/bin/python benchmarks/app_cli.py [--calls 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envs.build import build_environment

REPO = Path(__file__).resolve().parents[1]
EVERY_APP_FIRST = (
    "import sys; from envs.apps import load_apps; load_apps(); from envs.apps.__main__ import main; sys.exit(main())"
)


def read_only_calls(world: Path) -> dict[str, dict[str, str]]:
    """One read of each of four apps, on files this world has."""
    files = world / "filesystem"
    workbook = next(files.rglob("*.xlsx")).relative_to(files).as_posix()
    document = next(files.rglob("*.docx")).relative_to(files).as_posix()
    return {
        "filesystem.list_files": {},
        "mail.list_messages": {},
        "docs.read_document": {"path": document},
        "sheets.list_sheets": {"path": workbook},
    }


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        build_environment(data)
        world = next(p for p in sorted((data / "worlds").iterdir()) if any(p.rglob("*.docx")))
        print(f"world {world.name}, median of {args.calls} interleaved calls each")
        print(f"{'operation':24} {'all apps':>9} {'as run':>8} {'ratio':>6}")
        for tool, arguments in read_only_calls(world).items():
            cli = [tool, json.dumps(arguments), "--world", str(world)]
            every, as_run = [], []
            for _ in range(args.calls):
                every.append(seconds([sys.executable, "-c", EVERY_APP_FIRST, *cli]))
                as_run.append(seconds([sys.executable, "-m", "envs.apps", *cli]))
            before, after = statistics.median(every), statistics.median(as_run)
            print(f"{tool:24} {before:8.2f}s {after:7.2f}s {before / after:5.2f}×")


if __name__ == "__main__":
    main()
