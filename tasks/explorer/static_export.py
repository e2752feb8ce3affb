"""``recipe view RUN --static OUT``: the explorer as a folder that opens from ``file://`` (no server, no network).

Browsers refuse ``fetch`` and JS modules on ``file://`` but run classic ``<script src>`` files, so the data travels as
scripts: ``data/run.js`` sets ``window.EXPLORER_STATIC`` (the overview, the per-tool report of each stage, curves
and tables, and the list rows with their tool calls in short form), and ``data/t/<id>.js`` calls
``window.explorerDetail(id, view)`` with one trajectory's turn-by-turn view, loaded when the page opens it. The page
then filters, sorts and pages the list in JS with the same rules as ``queries.TrajectoryFilter``.

A folder holds at most ``limit`` trajectories, a sample that covers every stage and source and keeps base and trained
of a task together (``selection.choose_sample``); the filters count what the folder holds, next to the run's count
("12 of 40"). The server is the way to read a large run whole.

Nothing lost, nothing outside: OUT is filled as a hidden sibling and swapped in whole (``envs.files.staged_dir``), so
a failed export leaves the earlier one as it was. OUT must be absent, an empty folder, or a folder an earlier export
made (``MARKER`` in it) that holds only the files an export writes and no symbolic link; anything else is refused in
one line. The only file names taken from the catalog are trajectory ids, and those must be integers.

    write_static(Explorer(store, decoder), Path("explorer-out"), progress=print)   # then open explorer-out/index.html
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envs.errors import RecipeError
from envs.files import check_replaceable, staged_dir
from tasks.explorer.queries import Explorer
from tasks.explorer.selection import choose_sample
from tasks.explorer.server import STATIC_DIR, page_html

DEFAULT_LIMIT = 5_000
MARKER = ".rl-recipe-explorer"
"""The file that marks a folder as an export's own: only such a folder (or an empty one) is replaced."""
EXPORT_FILE = re.compile(r"index\.html|\.rl-recipe-explorer|static/app\.(js|css)|data/run\.js|data/t/-?\d+\.js")
"""Every path (relative to OUT) an export writes: a re-export replaces nothing else."""
CHUNK = 200
"""Trajectories read and written per batch of queries."""
PROGRESS_EVERY = 1_000
PROGRESS_S = 5.0
"""A progress line every this many trajectories or seconds, whichever comes first."""


class StaticExportError(RecipeError):
    """OUT cannot be written, or the catalog names a trajectory with something other than an integer (a folder
    that is not the export's own is ``envs.files.ForeignFolderError``)."""


@dataclass(frozen=True)
class StaticExport:
    """What ``write_static`` wrote."""

    index: Path
    written: int
    """Trajectories in the folder."""
    total: int
    """Trajectories in the run."""
    size: int
    """Bytes written."""
    seconds: float


def check_out(out: Path) -> None:
    """Refuse ``out`` unless replacing it loses nothing (``envs.files.check_replaceable``): absent, an empty folder, or
    an earlier export's folder holding only files an export writes and no symbolic link."""
    check_replaceable(out, MARKER, EXPORT_FILE, "an export")


def _sample_rows(explorer: Explorer) -> list[dict[str, Any]]:
    """Every trajectory's sampling keys; an id that is not an integer (a damaged or forged catalog) is refused, as
    it would become a file name."""
    rows = explorer.sample_rows()
    for row in rows:
        if type(row["id"]) is not int:
            raise StaticExportError(
                f"trajectory id {str(row['id'])[:80]!r} in {explorer.store.catalog_path} is not an integer: "
                "the catalog is damaged"
            )
    return rows


def _put(path: Path, text: str) -> int:
    """Write ``text`` at ``path`` (its folder made) and return its size in bytes."""
    data = text.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return len(data)


def _script(variable: str, value: Any) -> str:
    return f"{variable}{json.dumps(value, separators=(',', ':'))};\n"


def _folder_facets(held: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """The run's filter values with the folder's counts (``n``, 0 for a value the sample left out) and the run's
    (``of``): the page's filters count what the folder holds and say so when it holds fewer."""
    facets: dict[str, Any] = {"weight_version": held["weight_version"]}
    for name, values in run.items():
        if name != "weight_version":
            counts = {v["value"]: v["n"] for v in held[name]}
            facets[name] = [{"value": v["value"], "n": counts.get(v["value"], 0), "of": v["n"]} for v in values]
    return facets


def _run_data(explorer: Explorer, ids: Sequence[int], total: int) -> dict[str, Any]:
    """``window.EXPLORER_STATIC``: the overview (its counts those of the folder, next to the run's), every stage's
    tool report, the curves and the list rows."""
    overview = explorer.overview()
    held = explorer.facets(ids)
    overview["facets"] = _folder_facets(held, overview["facets"])
    per_stage = {v["value"]: v["n"] for v in held["stage"]}
    for stage in overview["stages"]:
        stage["trajectories_of"] = stage["trajectories"]
        stage["trajectories"] = per_stage.get(stage["stage"], 0)
    stages = [r["stage"] for r in explorer.catalog.rows("SELECT DISTINCT stage FROM tool_calls ORDER BY stage")]
    return {
        "overview": overview,
        "tools": {stage: explorer.tools(stage or None) for stage in ["", *stages]},
        "curves": explorer.curves(),
        "rows": explorer.list_rows_with_calls(ids),
        "total": total,
    }


def _write_details(
    explorer: Explorer, folder: Path, ids: Sequence[int], progress: Callable[[str], None], started: float
) -> int:
    """``data/t/<id>.js`` for each id, in batches, saying how far it got every so often; returns the bytes written."""
    size, said_at, said_count = 0, time.monotonic(), 0
    for first in range(0, len(ids), CHUNK):
        for trajectory_id, view in explorer.trajectory_views(ids[first : first + CHUNK]).items():
            text = f"window.explorerDetail({trajectory_id:d}, {json.dumps(view)});\n"
            size += _put(folder / f"{trajectory_id:d}.js", text)
        done = min(first + CHUNK, len(ids))
        if done < len(ids) and (done - said_count >= PROGRESS_EVERY or time.monotonic() - said_at >= PROGRESS_S):
            progress(f"  {done} of {len(ids)} trajectories written ({time.monotonic() - started:.0f} s)")
            said_at, said_count = time.monotonic(), done
    return size


def _write_folder(
    explorer: Explorer, folder: Path, ids: Sequence[int], total: int, progress: Callable[[str], None], started: float
) -> int:
    """Every file of the export into ``folder`` (the staged sibling, so plain writes: the swap fsyncs them); returns
    the bytes written."""
    run_data = _run_data(explorer, ids, total)
    progress(f"  overview, tool reports, curves and list ready ({time.monotonic() - started:.0f} s)")
    files = {
        "data/run.js": _script("window.EXPLORER_STATIC = ", run_data),
        "static/app.js": (STATIC_DIR / "app.js").read_text(encoding="utf-8"),
        "static/app.css": (STATIC_DIR / "app.css").read_text(encoding="utf-8"),
        "index.html": page_html('<script src="data/run.js"></script>'),
        MARKER: json.dumps({"run_id": explorer.store.run_id, "trajectories": len(ids), "of": total}) + "\n",
    }
    size = _write_details(explorer, folder / "data" / "t", ids, progress, started)
    return size + sum(_put(folder / name, text) for name, text in files.items())


def write_static(
    explorer: Explorer, out: Path, limit: int = DEFAULT_LIMIT, progress: Callable[[str], None] = lambda line: None
) -> StaticExport:
    """Write the folder (see the module docstring), telling ``progress`` how far it got; returns what it wrote."""
    started = time.monotonic()
    out = Path(os.path.abspath(out))
    check_out(out)
    rows = _sample_rows(explorer)
    ids = choose_sample(rows, limit)
    strata = len({(r["stage"], r["source"]) for r in rows})
    progress(f"exporting {len(ids)} of {len(rows)} trajectories ({strata} stage/source groups, each its share)")
    try:
        with staged_dir(out) as folder:
            size = _write_folder(explorer, folder, ids, len(rows), progress, started)
    except OSError as error:
        raise StaticExportError(f"cannot write the export to {out}: {error}") from None
    return StaticExport(out / "index.html", len(ids), len(rows), size, time.monotonic() - started)
