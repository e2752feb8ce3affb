"""The part of a Harbor task's ``environment/Dockerfile`` a container-less sandbox can follow.

A Harbor task's files reach its container through its Dockerfile (``WORKDIR /app``, ``COPY data.csv /app/``, ``RUN
...``). The local (bubblewrap) provider has no image builder, so it reads the Dockerfile for the steps that shape the
working folder: ``WORKDIR`` (where the agent works), ``COPY`` / ``ADD`` of build-context files and ``RUN`` (run in the
sandbox, without network). ``FROM`` and the container's metadata (``ENV``, ``CMD``, ``LABEL``, ...) are ignored: the
host's system stands in for the base image. ``COPY --from`` (multi-stage builds) and ``ADD`` of a URL cannot be
followed and raise ``DockerfileError``.

Example::

    recipe = read_dockerfile(task_dir / "environment" / "Dockerfile")
    recipe.workdir                      # "/app"
    recipe.steps                        # [Copy(sources=("fib.py",), dest="/app/", workdir="/app"), Run(...)]
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DEFAULT_WORKDIR = "/app"
"""Where the agent works when the Dockerfile sets no ``WORKDIR`` (Terminal-Bench's convention)."""
_IGNORED = frozenset(
    {"FROM", "ENV", "ARG", "CMD", "ENTRYPOINT", "EXPOSE", "LABEL", "USER", "VOLUME", "SHELL", "HEALTHCHECK", "ONBUILD"}
    | {"STOPSIGNAL", "MAINTAINER"}
)
_FLAG = re.compile(r"^--[a-z-]+(=\S*)?$")


class DockerfileError(ValueError):
    """A Dockerfile step the local provider cannot follow (use the docker provider for such a task)."""


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]  # relative to the build context (environment/)
    dest: str  # absolute, in the container
    workdir: str


@dataclass(frozen=True)
class Run:
    command: str
    workdir: str


@dataclass(frozen=True)
class DockerfileRecipe:
    workdir: str  # the final WORKDIR: the agent's, the oracle's and the verifier's working folder
    steps: tuple[Copy | Run, ...]


def instructions(text: str) -> list[tuple[str, str]]:
    """(keyword, arguments) per instruction: comments dropped, ``\\``-continued lines joined."""
    instructions, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).strip().partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        pending = ""
    if pending.strip():
        keyword, _, args = pending.strip().partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    return instructions


def _words(args: str) -> list[str]:
    """The exec (JSON array) form or the whitespace-separated one."""
    if args.startswith("["):
        try:
            words = json.loads(args)
        except json.JSONDecodeError as exc:
            raise DockerfileError(f"bad JSON form {args!r}: {exc}") from None
        return [str(word) for word in words]
    return args.split()


def _copy(keyword: str, args: str, workdir: str) -> Copy:
    words = _words(args)
    flags = [word for word in words if _FLAG.match(word)]
    if any(flag.startswith("--from") for flag in flags):
        raise DockerfileError(f"{keyword} --from (a multi-stage build) needs the docker provider")
    paths = [word for word in words if word not in flags]
    if len(paths) < 2:
        raise DockerfileError(f"{keyword} {args!r} names no source or no destination")
    if any("://" in source for source in paths[:-1]):
        raise DockerfileError(f"{keyword} of a URL needs the docker provider (no network here)")
    dest = paths[-1] if paths[-1].startswith("/") else posixpath.join(workdir, paths[-1])
    return Copy(tuple(paths[:-1]), dest + ("/" if paths[-1].endswith("/") and not dest.endswith("/") else ""), workdir)


def read_dockerfile(path: Path) -> DockerfileRecipe:
    """The working folder and the file-shaping steps of ``path``; a task with no Dockerfile works in ``/app``."""
    if not path.is_file():
        return DockerfileRecipe(DEFAULT_WORKDIR, ())
    workdir, seen_workdir, steps = DEFAULT_WORKDIR, False, []
    for keyword, args in instructions(path.read_text(encoding="utf-8")):
        if keyword == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir if seen_workdir else "/", args.strip("\"'")))
            seen_workdir = True
        elif keyword in ("COPY", "ADD"):
            steps.append(_copy(keyword, args, workdir))
        elif keyword == "RUN":
            words = _words(args) if args.startswith("[") else None
            steps.append(Run(shlex.join(words) if words else args, workdir))
        elif keyword not in _IGNORED:
            raise DockerfileError(f"{path}: unknown instruction {keyword}")
    return DockerfileRecipe(workdir, tuple(steps))
