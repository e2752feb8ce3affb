"""``recipe --help`` is for users: it opens with what rl-recipe is and where to read more (not the developer notes of
``cli/main.py``), and every command and argument of the whole tree says in one line what it is for."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from cli.main import build_parser

# Help still missing in cli/commands/view.py, which another helper is editing now (the "newcomer's path" issue) and
# fills in. Remove an entry once its help lands: a stale one fails the test.
KNOWN_GAPS: set[str] = set()


def _parsers(parser: argparse.ArgumentParser, path: str = "recipe") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every parser of the tree with its command line, the root first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _parsers(child, f"{path} {name}")


def _name(action: argparse.Action) -> str:
    """An argument as a reader of the help page knows it: its flags, COMMAND for a list of subcommands, its metavar."""
    if action.option_strings:
        return "/".join(action.option_strings)
    return "COMMAND" if isinstance(action, argparse._SubParsersAction) else action.metavar or action.dest


def _undocumented(path: str, parser: argparse.ArgumentParser) -> Iterator[str]:
    """``path ARGUMENT`` for each argument of ``parser`` (a subcommand counts as one) without help."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if not (action.help or "").strip():
            yield f"{path} {_name(action)}"
        if isinstance(action, argparse._SubParsersAction):
            yield from (f"{path} {command.dest}" for command in action._choices_actions if not command.help)


def test_every_command_and_argument_has_help() -> None:
    gaps = {gap for path, parser in _parsers(build_parser()) for gap in _undocumented(path, parser)}
    assert sorted(gaps - KNOWN_GAPS) == [], "give these a one-line help="
    assert sorted(KNOWN_GAPS - gaps) == [], "these have help now: remove them from KNOWN_GAPS"


def test_the_top_help_is_for_users_not_developers() -> None:
    text = build_parser().format_help()
    assert "rl-recipe" in text and "README.md" in text and "recipe run --profile local" in text
    assert "register(subparsers)" not in text and "cli/commands" not in text and "``" not in text


@pytest.mark.parametrize("path", [path for path, _ in _parsers(build_parser())])
def test_each_help_page_opens_with_its_line_and_shows_only_telling_defaults(path: str) -> None:
    [parser] = [parser for p, parser in _parsers(build_parser()) if p == path]
    text = parser.format_help()  # a stray % in a help string would raise here
    assert parser.description, f"{path} --help has no description"
    assert "(default: None)" not in text and "(default: [])" not in text and "(default: False)" not in text


def test_a_default_is_shown_once() -> None:
    [server] = [parser for path, parser in _parsers(build_parser()) if path == "recipe server"]
    [generate] = [parser for path, parser in _parsers(build_parser()) if path == "recipe envs generate"]
    assert "(default: 4200)" in server.format_help()
    assert generate.format_help().count("(default: data)") == 1  # its help names the default already
