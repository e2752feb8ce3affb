"""Argument types for the ``recipe`` command line: a number out of range is refused by argparse itself, before any
import or set-up, with the usual ``recipe ...: error: argument --steps: ...`` line and exit code 2."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(cast: Callable[[str], float], minimum: float, maximum: float, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (minimum <= value <= maximum) or (isinstance(value, float) and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"{text} is not {what}")
        return value

    return parse


positive_int = _number(int, 1, math.inf, "a whole number ≥ 1")
non_negative_int = _number(int, 0, math.inf, "a whole number ≥ 0")
port = _number(int, 0, 65535, "a port (0–65535)")
listen_port = _number(int, 1, 65535, "a port from 1 to 65535")  # not 0 (any free port): clients must know it
non_negative_float = _number(float, 0.0, math.inf, "a number ≥ 0")
positive_float = _number(float, math.ulp(0.0), math.inf, "a number > 0")
worlds_per_domain = _number(int, 3, 1000, "a number of worlds from 3 (world 3 is held out) to 1000")
seed = _number(int, 0, 2**63 - 1, "a seed from 0 to 2**63 - 1")

RUNS_ROOT_HELP = "the folder of run folders a run id is looked up in"
