"""The ``recipe`` command line: ``recipe <area> <command> [options]``; ``recipe <area> --help`` lists its commands.

Areas live in ``flows/commands/`` (one module each, with ``register(subparsers)``). Heavy imports happen inside each
command so ``recipe --help`` stays instant. A command that raises ``RecipeError`` (``envs.errors``: a flag, a config
or a file to fix) ends with one line ``recipe: error: <message>`` on stderr and exit code 2, like a bad flag; so does
a ``pydantic.ValidationError`` from the values a command was given (a spec built from flags). Numbers out of range are
refused by argparse itself (``flows.args``) before anything runs.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from pathlib import Path

from pydantic import ValidationError

from envs.errors import RecipeError
from flows import commands as command_package

USAGE_ERROR = 2  # argparse's exit code for a bad command line; a RecipeError is one too


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipe", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for module in sorted(pkgutil.iter_modules(command_package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{command_package.__name__}.{module.name}").register(commands)
    return parser


def prefect_defaults() -> None:
    """Before Prefect is imported: its home (database, results) in the project's ``.prefect/`` unless set, and no
    telemetry (the temporary server's telemetry write races its own start-up on SQLite)."""
    os.environ.setdefault("PREFECT_HOME", str(Path.cwd() / ".prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def main(argv: list[str] | None = None) -> int:
    prefect_defaults()
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except RecipeError as error:
        return _usage_error(str(error))
    except ValidationError as error:
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or error.title}: {e['msg']}" for e in error.errors())
        return _usage_error(f"invalid {error.title}: {fields}")


def _usage_error(message: str) -> int:
    print(f"recipe: error: {' '.join(message.split())}", file=sys.stderr)
    return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
