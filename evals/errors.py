"""The eval layer's errors a user fixes (``RecipeError``s: the CLI prints one line): an eval that cannot run as
configured, and an eval folder that is missing or damaged."""

from __future__ import annotations

from envs.errors import RecipeError


class EvalConfigError(RecipeError, ValueError):
    """An eval that cannot run as configured (engine, model name, harness settings, task source, output folder)."""


class EvalFolderError(RecipeError, ValueError):
    """An eval folder that is not there, not finished, or holds a damaged line (the message names file and line)."""
