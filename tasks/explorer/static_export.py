"""``recipe view RUN --static OUT``: the explorer as a folder that opens from ``file://`` (no server, no network).

Browsers refuse ``fetch`` and JS modules on ``file://`` but run classic ``<script src>`` files, so the data travels as
scripts: ``data/run.js`` sets ``window.EXPLORER_STATIC`` (the overview, the per-tool report of each stage, curves
and tables, and the list rows with their tool calls in short form), and ``data/t/<id>.js`` calls
``window.explorerDetail(id, view)`` with one trajectory's turn-by-turn view, loaded when the page opens it. The page
then filters, sorts and pages the list in JS with the same rules as ``queries.TrajectoryFilter``.

A static folder holds at most ``limit`` trajectories (the first by id; the page says when it holds fewer than the
run): the server is the way to read a large run.

    write_static(Explorer(store, decoder), Path("explorer-out"))   # then open explorer-out/index.html
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from envs.files import atomic_write_text
from tasks.explorer.queries import LIST_COLUMNS, Explorer
from tasks.explorer.server import STATIC_DIR, page_html

DEFAULT_LIMIT = 5_000


def _script(variable: str, value: Any) -> str:
    return f"{variable}{json.dumps(value, separators=(',', ':'))};\n"


def write_static(explorer: Explorer, out: Path, limit: int = DEFAULT_LIMIT) -> Path:
    """Write the folder (see the module docstring); returns the path of its ``index.html``."""
    out.mkdir(parents=True, exist_ok=True)
    overview = explorer.overview()
    rows = explorer.catalog.rows(f"SELECT {', '.join(LIST_COLUMNS)} FROM trajectories ORDER BY id LIMIT ?", [limit])
    calls: dict[int, list[list[Any]]] = {}
    if rows:
        for call in explorer.catalog.rows(
            """SELECT DISTINCT trajectory_id, tool, ok, returned_empty, timed_out, error_class FROM tool_calls
               WHERE trajectory_id BETWEEN ? AND ? ORDER BY ALL""",
            [rows[0]["id"], rows[-1]["id"]],
        ):
            calls.setdefault(call["trajectory_id"], []).append(
                [call["tool"], call["ok"], call["returned_empty"], call["timed_out"], call["error_class"]]
            )
    for row in rows:
        row["calls"] = calls.get(row["id"], [])
    stages = [r["stage"] for r in explorer.catalog.rows("SELECT DISTINCT stage FROM tool_calls ORDER BY stage")]
    data = {
        "overview": overview,
        "tools": {stage: explorer.tools(stage or None) for stage in ["", *stages]},
        "curves": explorer.curves(),
        "rows": rows,
        "total": overview["counts"].get("trajectories", 0),
    }
    atomic_write_text(out / "data" / "run.js", _script("window.EXPLORER_STATIC = ", data))
    details = out / "data" / "t"
    if details.exists():
        shutil.rmtree(details)
    for row in rows:
        view = explorer.trajectory(row["id"])
        atomic_write_text(details / f"{row['id']}.js", f"window.explorerDetail({row['id']}, {json.dumps(view)});\n")
    for name in ("app.js", "app.css"):
        atomic_write_text(out / "static" / name, (STATIC_DIR / name).read_text(encoding="utf-8"))
    index = out / "index.html"
    atomic_write_text(index, page_html('<script src="data/run.js"></script>'))
    return index
