"""The ``recipe`` command line: ``recipe <area> <command> [options]``; ``recipe <area> --help`` lists its commands.

Areas live in ``cli/commands/`` (one module each, with ``register(subparsers)``). Heavy imports happen inside each
command so ``recipe --help`` stays instant. A command that raises ``RecipeError`` (``envs.errors``: a flag, a config
or a file to fix) ends with one line ``recipe: error: <message>`` on stderr and exit code 2, like a bad flag; so does
a ``pydantic.ValidationError`` from the values a command was given (a spec built from flags). Numbers out of range are
refused by argparse itself (``cli.args``) before anything runs.

``recipe --help`` shows ``DESCRIPTION`` (for users), not this docstring. Every command and argument carries a one-line
``help`` (``tests/flows/test_cli_help.py`` walks the tree); a command's ``--help`` opens with that line, and a flag's
help ends with its default unless the text already names one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cli import commands as command_package
from envs.errors import RecipeError

USAGE_ERROR = 2  # argparse's exit code for a bad command line; a RecipeError is one too
DESCRIPTION = """\
rl-recipe: RL post-training of tool-using agents as a chain of gated stages (de-risk, TITO check, systems tune,
overfit gate, ablations, hero run, transfer evals), each a Prefect flow that runs only when the one before passed.
The whole chain runs on this machine with a tiny model the project builds; cluster profiles run it on Ray.

start here:
  recipe run --profile local      the seven gated stages on this machine (make demo); prints the run folder
  recipe audit RUN / report RUN   a run's trail of gates and findings / its report.md and report.html
  recipe view RUN                 the trace explorer: a run's trajectories in the browser
  recipe server / serve           the Prefect UI, and the deployments to start runs from it

More in README.md (and docs/) in the repository."""


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's line breaks, and ends a flag's help with its default when the default says something
    (not None, False or an empty list) and the help does not already name it: a newcomer sees what omitting it does."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        silent = action.default is None or action.default is False or action.default in ([], argparse.SUPPRESS)
        if silent or "(default" in text or "default:" in text or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class _Commands(argparse._SubParsersAction):
    """Subcommands whose ``--help`` opens with the one line that lists them in their parent's help."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs.setdefault("description", kwargs.get("help"))
        return super().add_parser(name, **kwargs)


class _Parser(argparse.ArgumentParser):
    """Every parser of the tree formats its help alike: ``add_subparsers`` makes its children of this class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)


def build_parser() -> argparse.ArgumentParser:
    """The whole ``recipe`` tree; the module docstring above is for developers, so the help shows ``DESCRIPTION``."""
    parser = _Parser(prog="recipe", description=DESCRIPTION)
    commands = parser.add_subparsers(
        title="commands",
        dest="command",
        required=True,
        metavar="COMMAND",
        help="see `recipe COMMAND --help` for its options",
    )
    for module in sorted(pkgutil.iter_modules(command_package.__path__), key=lambda m: m.name):
        importlib.import_module(f"{command_package.__name__}.{module.name}").register(commands)
    return parser


def prefect_defaults() -> None:
    """Before Prefect is imported: its home (database, results) in the project's ``.prefect/`` unless set, no
    telemetry (the temporary server's telemetry write races its own start-up on SQLite), and 180 s for a temporary
    server to start instead of 20: two runs started together on two busy cores (one SQLite database) took longer, and
    both failed before any work."""
    os.environ.setdefault("PREFECT_HOME", str(Path.cwd() / ".prefect"))
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")


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
