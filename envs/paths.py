"""Path confinement: every app operation resolves user-supplied paths through ``resolve_inside``."""

from __future__ import annotations

import os
from pathlib import Path


class PathEscapeError(ValueError):
    """A path that would leave the world root (``..``, absolute, or a symlink pointing outside)."""


def resolve_inside(root: Path, relative: str) -> Path:
    """Return ``root / relative`` resolved, refusing anything that leaves ``root``.

    Refused: absolute paths, ``~``, NUL bytes, and paths whose resolution (following ``..`` and symlinks, including a
    symlink as the last component) ends outside ``root``.
    """
    if not isinstance(relative, str):
        raise PathEscapeError(f"path must be a string, got {type(relative).__name__}")
    if "\x00" in relative:
        raise PathEscapeError("path contains a NUL byte")
    if relative.startswith(("/", "~")) or os.path.isabs(relative):
        raise PathEscapeError(f"absolute paths are not allowed: {relative!r} (use a path relative to the world root)")
    root_resolved = root.resolve()
    candidate = (root_resolved / relative).resolve()
    if candidate != root_resolved and not candidate.is_relative_to(root_resolved):
        raise PathEscapeError(f"path leaves the world root: {relative!r}")
    return candidate
