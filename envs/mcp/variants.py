"""Known-bad tool variants: deliberately broken tools the de-risk stage must catch before any training run.

Each variant reproduces a failure the recipe met in practice, as a wrapper over the tools it breaks (the apps stay
correct; the MCP servers put the wrappers in front of them when a config selects a variant):

- ``slides_returns_none``: the slides write tools do their work but return nothing, so the model never learns that
  they succeeded (caught by the "no tool returns nothing on success" gate).
- ``pdf_flatten``: ``pdf.read_pdf`` reads each text line straight across the page (pdfplumber's plain
  ``extract_text``), so the lines of a two-column page interleave (caught by low oracle / reward on PDF tasks).
- ``code_exec_no_packages``: ``code_exec.run_python`` runs without site-packages, so ``import openpyxl`` raises
  ModuleNotFoundError (caught by the top error signature "ModuleNotFoundError -> preinstall package").
- ``slow_cell_read``: ``sheets.read_cell`` answers right, but only after ``SLOW_TOOL_S`` (a file lock held elsewhere,
  a network drive): past a harness tool timeout of a few seconds, every call times out (caught by the "no tool times
  out" gate; ``make gate-matrix`` runs it with ``harness.tool_timeout_s=1``).

Example::

    runner = runner_for("slides.add_slide", frozenset({BadVariant.SLIDES_RETURNS_NONE}))
    runner(world, {"path": "decks/d.pptx", "title": "T", "bullets": []})  # -> "" (the slide is still added)
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pdfplumber

from envs.apps import TOOLS, World, call_tool
from envs.apps.base import open_with
from envs.options import BadVariant

Runner = Callable[[World, dict[str, Any]], str]
"""Runs one tool on a world with raw JSON arguments and returns its text (raising ToolError on a fixable failure)."""

READ_OP_PREFIXES = ("read", "list", "search")
PAGE_HEADER = re.compile(r"^--- page (\d+) ---$", flags=re.MULTILINE)
# Runs before the user's code: drops site-packages from the import path, so only the standard library is importable.
NO_PACKAGES_PRELUDE = (
    "import sys; sys.path[:] = [p for p in sys.path if not p.endswith(('site-packages', 'dist-packages'))]\n"
)


def direct_runner(name: str) -> Runner:
    """The correct tool ``name``: ``call_tool`` validates the arguments and runs the registered operation."""

    def run(world: World, args: dict[str, Any]) -> str:
        return call_tool(world, name, args)

    return run


def _returns_nothing(inner: Runner) -> Runner:
    def run(world: World, args: dict[str, Any]) -> str:
        inner(world, args)  # the write still happens: only the report of it is lost
        return ""

    return run


def _flattened_pdf(inner: Runner) -> Runner:
    """Re-read the pages the correct tool selected with plain ``extract_text`` (line by line across the page).

    The correct tool runs first, so argument checks, path checks and page selection (and their error messages) stay
    those of ``pdf.read_pdf``; its "--- page N ---" headers name the pages to re-read.
    """

    def run(world: World, args: dict[str, Any]) -> str:
        text = inner(world, args)
        numbers = [int(number) for number in PAGE_HEADER.findall(text)]
        if not numbers:
            return text
        with open_with(pdfplumber.open, world.path(args["path"]), "a PDF") as pdf:
            chunks = [
                f"--- page {n} ---\n{pdf.pages[n - 1].extract_text() or '(no text on this page)'}" for n in numbers
            ]
        return "\n".join(chunks)

    return run


SLOW_TOOL_S = 3.0
"""How long ``slow_cell_read`` takes: short enough that the oracle check (whose calls may take minutes) still passes
in reasonable time, longer than the 1-s tool timeout the matrix case gives the harness."""


def _slow(inner: Runner) -> Runner:
    def run(world: World, args: dict[str, Any]) -> str:
        time.sleep(SLOW_TOOL_S)  # in the gateway's worker thread: a caller that gave up has moved on
        return inner(world, args)

    return run


def _without_packages(inner: Runner) -> Runner:
    def run(world: World, args: dict[str, Any]) -> str:
        code = args.get("code")
        # A non-string ``code`` goes through unchanged so the correct tool reports the bad argument.
        return inner(world, {**args, "code": NO_PACKAGES_PRELUDE + code} if isinstance(code, str) else args)

    return run


@dataclass(frozen=True)
class VariantSpec:
    tools: frozenset[str]
    """Registry names of the tools the variant breaks."""
    wrap: Callable[[Runner], Runner]
    """Turns the correct runner of one of those tools into the broken one."""


def _writes(app: str) -> frozenset[str]:
    return frozenset(
        name for name, spec in TOOLS.items() if spec.app == app and not spec.fn.__name__.startswith(READ_OP_PREFIXES)
    )


VARIANTS: dict[BadVariant, VariantSpec] = {
    BadVariant.SLIDES_RETURNS_NONE: VariantSpec(_writes("slides"), _returns_nothing),
    BadVariant.PDF_FLATTEN: VariantSpec(frozenset({"pdf.read_pdf"}), _flattened_pdf),
    BadVariant.CODE_EXEC_NO_PACKAGES: VariantSpec(frozenset({"code_exec.run_python"}), _without_packages),
    BadVariant.SLOW_CELL_READ: VariantSpec(frozenset({"sheets.read_cell"}), _slow),
}


def runner_for(name: str, variants: frozenset[BadVariant] = frozenset()) -> Runner:
    """The runner of tool ``name``: the correct one, wrapped by every selected variant that breaks this tool."""
    runner = direct_runner(name)
    for variant in sorted(variants):
        spec = VARIANTS[variant]
        if name in spec.tools:
            runner = spec.wrap(runner)
    return runner
