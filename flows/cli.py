"""The ``recipe`` command line: ``recipe <area> <command> [options]``; ``recipe <area> --help`` lists its commands.

Areas live in ``flows/commands/`` (one module each, with ``register(subparsers)``). Heavy imports happen inside each
command so ``recipe --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from flows import commands as command_package


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recipe", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for module in sorted(pkgutil.iter_modules(command_package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{command_package.__name__}.{module.name}").register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
