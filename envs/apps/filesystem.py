"""filesystem: list, read, write and grep the plain-text files of the world's ``filesystem/``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field

from envs.apps.base import READER_BY_SUFFIX, ToolError, World, tool
from envs.files import SpecialFileError, atomic_write_text, read_regular_bytes
from envs.paths import PathEscapeError

APP = "filesystem"
MAX_SEARCH_HITS = 200
MAX_SEARCH_BYTES = 2_000_000


def read_text_or_none(file: Path) -> str | None:
    """The UTF-8 text of ``file``, or None when it is a binary file; a FIFO or other special file is refused with a
    ``ToolError`` (reading it would block the tool's thread forever)."""
    try:
        data = read_regular_bytes(file)
    except SpecialFileError as error:
        raise ToolError(f"{file.name!r} is {error.strerror}; only regular files can be read") from None
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _walk(world: World, top: Path, recursive: bool) -> list[str]:
    """Relative paths under ``top`` (folders end with "/"), sorted; symlinks are listed, never followed."""
    entries: list[str] = []
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        here = Path(folder)
        entries += [world.rel(here / d) + "/" for d in dirs]
        entries += [world.rel(here / f) for f in files]
        if not recursive:
            break
    return sorted(entries)


def _searchable_files(world: World, top: Path) -> list[Path]:
    """The files under ``top`` worth grepping: inside the world (symlinks out are skipped), not huge, not office."""
    names = [world.rel(top)] if top.is_file() else [p for p in _walk(world, top, True) if not p.endswith("/")]
    files = []
    for name in names:
        try:
            file = world.path(name)
        except PathEscapeError:
            continue
        if file.is_file() and file.suffix.lower() not in READER_BY_SUFFIX and file.stat().st_size <= MAX_SEARCH_BYTES:
            files.append(file)
    return files


@tool(APP)
def list_files(world: World, path: str = ".", recursive: bool = True) -> str:
    """List the files and folders under a folder of the company filesystem.

    Args:
        path: folder relative to the filesystem root ("." = the root).
        recursive: true (default) lists everything below the folder; false lists only its direct entries.

    Returns one path per line, relative to the filesystem root (pass them as-is to other tools); folders end with "/".
    """
    top = world.path(path)
    if not top.exists():
        raise ToolError(f"no folder {path!r} in the filesystem (use filesystem.list_files with path '.')")
    if not top.is_dir():
        raise ToolError(f"{path!r} is a file, not a folder")
    entries = _walk(world, top, recursive)
    return "\n".join(entries) if entries else f"(folder {world.rel(top)!r} is empty)"


@tool(APP)
def read_file(world: World, path: str, max_chars: Annotated[int, Field(gt=0)] = 20000) -> str:
    """Read a plain-text file (.txt .md .csv .json .py .sh .yaml ...).

    Args:
        path: file path relative to the filesystem root.
        max_chars: return at most this many characters (default 20000); a note says when the text was cut.

    Returns the file's text. Office files and PDFs are refused with the name of the tool that reads them
    (docs.read_document, sheets.read_sheet, pdf.read_pdf, slides.read_deck).
    """
    file = _plain_text_file(world, path, reading=True)
    if not file.exists():
        raise ToolError(f"no file {path!r} in the filesystem (use filesystem.list_files to see what exists)")
    text = read_text_or_none(file)
    if text is None:
        raise ToolError(f"{path!r} is a binary file and cannot be shown as text")
    if not text:
        return f"(file {path!r} is empty)"
    if len(text) > max_chars:
        return text[:max_chars] + f"\n[truncated: showing {max_chars} of {len(text)} characters]"
    return text


@tool(APP)
def write_file(world: World, path: str, content: str) -> str:
    """Create or overwrite a plain-text file (parent folders are created).

    Args:
        path: file path relative to the filesystem root.
        content: the full new text of the file (UTF-8).

    Returns "wrote N bytes to PATH". Office files and PDFs cannot be written this way: use the docs, sheets or
    slides tools.
    """
    file = _plain_text_file(world, path, reading=False)
    atomic_write_text(file, content)
    return f"wrote {len(content.encode('utf-8'))} bytes to {world.rel(file)}"


@tool(APP)
def search_files(world: World, query: Annotated[str, Field(min_length=1)], path: str = ".") -> str:
    """Search the plain-text files under a folder for a string (case-insensitive, like grep -ri).

    Args:
        query: the text to look for (matched literally within a line).
        path: folder (or single file) to search, relative to the filesystem root; default the whole filesystem.

    Returns "path:lineno: line" per matching line (at most 200), or a note that nothing matched. Office files and
    PDFs are not searched.
    """
    top = world.path(path)
    if not top.exists():
        raise ToolError(f"no file or folder {path!r} in the filesystem")
    needle = query.lower()
    hits: list[str] = []
    for file in _searchable_files(world, top):
        text = read_text_or_none(file)
        for lineno, line in enumerate((text or "").splitlines(), start=1):
            if needle in line.lower():
                hits.append(f"{world.rel(file)}:{lineno}: {line.strip()}")
    if not hits:
        return f"no matches for {query!r} under {world.rel(top)!r}"
    if len(hits) > MAX_SEARCH_HITS:
        return "\n".join(hits[:MAX_SEARCH_HITS]) + f"\n[{len(hits) - MAX_SEARCH_HITS} more matches not shown]"
    return "\n".join(hits)


def _plain_text_file(world: World, path: str, reading: bool) -> Path:
    """``path`` in the world, or a ``ToolError`` naming the tools to use instead: an office file or a PDF is read and
    written by its own app, and a folder is no file."""
    file = world.path(path)
    if reader := READER_BY_SUFFIX.get(file.suffix.lower()):
        instead = f"read it with {reader}" if reading else f"write it with the {reader.split('.')[0]} tools"
        raise ToolError(f"{path!r} is a {file.suffix} file, not plain text; {instead}")
    if file.is_dir():
        instead = "use filesystem.list_files to see its contents" if reading else "give a file path"
        raise ToolError(f"{path!r} is a folder; {instead}")
    return file
