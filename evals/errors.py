"""The eval layer's one error: an eval that cannot run as configured (a ``RecipeError``: the CLI prints one line)."""

from __future__ import annotations

from envs.errors import RecipeError


class EvalConfigError(RecipeError, ValueError):
    """An eval that cannot run as configured (engine, model name, harness settings, task source, output folder)."""
