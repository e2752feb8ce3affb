"""Run one app operation on a world from the shell — how the code-only harness's oracle reaches the apps.

Usage::

    python -m envs.apps TOOL_NAME '<json arguments>' --world DIR
    python -m envs.apps sheets.read_cell '{"path": "models/m.xlsx", "sheet": "Model", "cell": "C5"}' --world ..

Prints the tool's output on stdout and exits 0; a ``ToolError`` (unknown tool, bad arguments, a path that leaves the
world, ...) goes to stderr with exit status 1; unparsable command-line input exits 2 (argparse's convention).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envs.apps import ToolError, World, call_tool
from envs.jsonio import JsonError, parse_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.apps", description="Run one app operation on a world.")
    parser.add_argument("tool", help="registry name, e.g. sheets.read_cell")
    parser.add_argument("arguments", help="the tool's arguments as one JSON object")
    parser.add_argument("--world", type=Path, required=True, help="the world folder (holds filesystem/, apps_data/)")
    options = parser.parse_args(argv)
    try:
        args = parse_json(options.arguments)
    except JsonError as error:
        parser.error(f"arguments are not valid JSON: {error}")
    if not options.world.is_dir():
        parser.error(f"--world {options.world} is not a folder")
    try:
        output = call_tool(World(options.world), options.tool, args)
    except ToolError as error:
        print(error, file=sys.stderr)
        return 1
    print(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
