"""JSON written by a model or a user, and JSON Lines that read back line for line: the one place both are parsed.

* ``parse_json`` — ``json.loads`` whose every refusal is a ``JsonError`` saying why: bad syntax (with line and column),
  nesting deeper than ``MAX_DEPTH`` levels (the parser's own ``RecursionError`` comes far deeper, and pydantic refuses
  to serialise values past ~250 levels, so a deeper value would fail later, far from its source), an integer longer
  than Python's int↔str limit (``sys.get_int_max_str_digits()``, 4300 digits by default).
* ``json_line`` — one value as a JSON line with every non-ASCII character escaped: U+2028 / U+2029 / U+0085 inside a
  string never appear raw, so a reader that splits on them (``str.splitlines``, JavaScript) still sees one line.
* ``json_lines`` — the non-blank lines of a JSONL text, split on ``\\n`` only, numbered from 1.

Example::

    for number, line in json_lines(path.read_text(encoding="utf-8")):
        row = parse_json(line)  # JsonError("nested deeper than 100 levels") for a hostile row
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects accepted (a scalar at top level is depth 0)."""


class JsonError(ValueError):
    """Text that ``parse_json`` refuses; the message says why (and where, for a syntax error)."""


def parse_json(text: str) -> Any:
    """``json.loads(text)``, refusing deep nesting and over-long integers with a ``JsonError`` (see module doc)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise JsonError(f"{error.msg} at line {error.lineno} column {error.colno}") from None
    except RecursionError:
        raise JsonError(f"arrays / objects nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:  # int('9' * 5000): the only other ValueError json.loads raises on a str
        raise JsonError(f"an integer has more than {sys.get_int_max_str_digits()} digits") from None
    if _depth(value) > MAX_DEPTH:
        raise JsonError(f"arrays / objects nested deeper than {MAX_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value, walked without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def json_line(value: Any) -> str:
    """``value`` as one JSON line (ending in ``\\n``), non-ASCII escaped (see module doc)."""
    return json.dumps(value, ensure_ascii=True) + "\n"


def json_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) for each non-blank line of ``text``, split on ``\\n`` only."""
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip(" \t\r"):  # JSON's whitespace (str.strip would also drop U+2028 and friends)
            yield number, line
