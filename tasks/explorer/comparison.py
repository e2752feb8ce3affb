"""Two runs side by side: ``recipe compare A B`` writes ``compare.md`` and a self-contained ``compare.html``.

What a reader asks of two runs (yesterday's and today's, before and after a fix, two profiles): per stage the status
and seconds of each; every gate criterion measured in A and in B with its bar and verdict; the key metrics by stage
with B − A; the stages' tables (ablation arms, transfer suites) with A's and B's row of each arm or suite one above
the other; and the training curves of both runs overlaid, one chart per stage, ``A · <loop>`` and ``B · <loop>`` in
its legend. It is built from the same pieces as ``recipe report`` (``tasks.report.Page``, ``Table``, ``fmt``) and
the explorer's curves and tables (``tasks.explorer.queries.Explorer.curves``: the catalog read-only, so a run still
going can be compared), drawn by ``tasks.plots.curves``.

Two runs compare when they are two (not one run twice) and record the same stages: the same index names the same
stage in both (``4-overfit``); a run that stopped earlier is compared on the stages it has (``–`` for the rest).

The folder is inside neither run (default ``<runs root>/compare/<A>-vs-<B>/``), filled as a hidden sibling and
swapped in whole; it must be new, empty, or an earlier comparison's (``MARKER`` in it, only its own files).

    files = write_comparison(RunStore.open(root, "local-1"), RunStore.open(root, "local-2"), root / "compare" / "x")
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from envs.errors import RecipeError
from envs.files import check_replaceable, staged_dir
from tasks.explorer.queries import Explorer
from tasks.plots import curves
from tasks.report import KEY_METRICS, Page, ReportFiles, Table, fmt
from tasks.run_store import STAGE_FOLDER, RunStore, StageManifest

MARKER = ".rl-recipe-compare"
"""The file that marks a folder as a comparison's own: only such a folder (or an empty one) is replaced."""
OWNED = re.compile(r"\.rl-recipe-compare|compare\.(md|html)|curves-[A-Za-z0-9._-]+\.png")
"""Every path (relative to the folder) a comparison writes."""
COMPARE_DIR = "compare"
Points = list[tuple[int, float]]
"""(step, mean reward) of one training loop."""


class CompareError(RecipeError, ValueError):
    """Two runs that cannot be compared, or a folder the comparison may not be written to."""


def default_out(runs_root: Path, a: RunStore, b: RunStore) -> Path:
    """``<runs_root>/compare/<A>-vs-<B>``: beside the runs, inside neither (the same command replaces it)."""
    return runs_root / COMPARE_DIR / f"{a.run_id}-vs-{b.run_id}"


def _manifests(store: RunStore) -> dict[str, StageManifest]:
    return {m.folder: m for m in store.manifests()}


def check_pair(a: RunStore, b: RunStore) -> None:
    """Refuse one run given twice, and two runs whose stages differ (module docstring), in one line."""
    if a.root.resolve() == b.root.resolve():
        raise CompareError(f"A and B are the same run ({a.run_id}): give two different runs")
    stages_a, stages_b = _manifests(a), _manifests(b)
    by_index_b = {_index(folder): folder for folder in stages_b}
    for folder in stages_a:
        other = by_index_b.get(_index(folder))
        if other is not None and other != folder:
            raise CompareError(
                f"runs {a.run_id} and {b.run_id} are of different stages: stage {_index(folder)} is {folder} in one "
                f"and {other} in the other"
            )
    if not set(stages_a) & set(stages_b):
        raise CompareError(
            f"runs {a.run_id} and {b.run_id} share no stage ({', '.join(stages_a) or 'none'} vs "
            f"{', '.join(stages_b) or 'none'}): nothing to compare"
        )


def _index(folder: str) -> int:
    match = STAGE_FOLDER.fullmatch(folder)
    return int(match[1]) if match else -1


def _folders(a: dict[str, StageManifest], b: dict[str, StageManifest]) -> list[str]:
    return sorted(set(a) | set(b), key=_index)


def _stage_table(a: dict[str, StageManifest], b: dict[str, StageManifest]) -> Table:
    def side(m: StageManifest | None) -> list[str]:
        return [m.status.value, fmt(m.duration_s)] if m else ["–", "–"]

    rows = [[folder, *side(a.get(folder)), *side(b.get(folder))] for folder in _folders(a, b)]
    return Table(["stage", "A status", "A seconds", "B status", "B seconds"], rows)


def _criteria(m: StageManifest | None) -> dict[str, dict[str, Any]]:
    return {str(c.get("name")): c for c in ((m.gate or {}).get("criteria", []) if m else []) if isinstance(c, dict)}


def _gate_table(a: dict[str, StageManifest], b: dict[str, StageManifest]) -> Table:
    def side(c: dict[str, Any] | None) -> list[str]:
        if c is None:
            return ["–", "–", "–"]
        return [
            fmt(c.get("measured")),
            f"{c.get('op')} {fmt(c.get('threshold'))}",
            "pass" if c.get("passed") else "FAIL",
        ]

    rows = []
    for folder in _folders(a, b):
        in_a, in_b = _criteria(a.get(folder)), _criteria(b.get(folder))
        rows += [[folder, name, *side(in_a.get(name)), *side(in_b.get(name))] for name in in_a | in_b]
    header = ["stage", "criterion", "A measured", "A needs", "A verdict", "B measured", "B needs", "B verdict"]
    return Table(header, rows)


def _difference(x: Any, y: Any) -> str:
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y))
    return fmt(float(y - x)) if numbers else ""


def _metric_table(a: dict[str, StageManifest], b: dict[str, StageManifest]) -> Table:
    rows = []
    for key in KEY_METRICS:
        for folder in _folders(a, b):
            m_a, m_b = a.get(folder), b.get(folder)
            x = m_a.metrics.get(key) if m_a else None
            y = m_b.metrics.get(key) if m_b else None
            if x is not None or y is not None:
                rows.append([key, folder, fmt(x), fmt(y), _difference(x, y)])
    return Table(["metric", "stage", "A", "B", "B − A"], rows)


def _stage_tables(a: dict[str, StageManifest], b: dict[str, StageManifest]) -> list[tuple[str, Table]]:
    """Each stage table (``StageManifest.tables``) of either run, A's and B's row of each key (its first column: the
    arm, the suite) one above the other."""
    found = []
    for folder in _folders(a, b):
        tables_a = a[folder].tables() if folder in a else {}
        tables_b = b[folder].tables() if folder in b else {}
        for name in tables_a | tables_b:
            rows_a, rows_b = tables_a.get(name, []), tables_b.get(name, [])
            columns = list(dict.fromkeys(key for row in rows_a + rows_b for key in row))
            key, rest = columns[0], columns[1:]
            keyed_a, keyed_b = {row.get(key): row for row in rows_a}, {row.get(key): row for row in rows_b}
            rows = [
                [fmt(value), side, *(fmt(row.get(c)) for c in rest)]
                for value in keyed_a | keyed_b
                for side, row in (("A", keyed_a.get(value)), ("B", keyed_b.get(value)))
                if row is not None
            ]
            found.append((f"{folder}: {name}", Table([key, "run", *rest], rows)))
    return found


def _curve_series(store: RunStore) -> dict[str, dict[str, Points]]:
    """Per stage: each training loop's reward per step, from the run's catalog."""
    by_stage: dict[str, dict[str, Points]] = {}
    for row in Explorer(store).curves()["steps"]:
        if row["reward_mean"] is not None:
            loops = by_stage.setdefault(row["stage"], {})
            loops.setdefault(row["run"], []).append((row["step"], row["reward_mean"]))
    return by_stage


def _overlaid(a: RunStore, b: RunStore, stage_folders: dict[str, str]) -> list[tuple[str, dict[str, Points]]]:
    """Per stage that trained in either run (its folder name), both runs' loops: ``A · <loop>``, ``B · <loop>``."""
    series_a, series_b = _curve_series(a), _curve_series(b)
    found = []
    for stage in sorted(set(series_a) | set(series_b), key=lambda s: _index(stage_folders.get(s, s))):
        series = {f"A · {loop}": points for loop, points in series_a.get(stage, {}).items()}
        series |= {f"B · {loop}": points for loop, points in series_b.get(stage, {}).items()}
        found.append((stage_folders.get(stage, stage), series))
    return found


def _draw_curves(a: RunStore, b: RunStore, stage_folders: dict[str, str], folder: Path) -> list[tuple[str, Path, str]]:
    """One chart per stage that trained in either run, both runs' loops overlaid: (name, path, file name)."""
    charts = []
    for label, series in _overlaid(a, b, stage_folders):
        name = f"curves-{re.sub(r'[^A-Za-z0-9._-]', '_', label)}.png"
        title = f"{label}: reward per step\nA: {a.run_id}\nB: {b.run_id}"
        charts.append((f"{label}: training curves", curves(folder / name, series, "mean reward", title), name))
    return charts


def _sections(stages_a: dict[str, StageManifest], stages_b: dict[str, StageManifest]) -> list[tuple[str, Table]]:
    """Every table of the comparison, in reading order, with its heading."""
    return [
        ("Stages", _stage_table(stages_a, stages_b)),
        ("Gates", _gate_table(stages_a, stages_b)),
        ("Metrics by stage", _metric_table(stages_a, stages_b)),
        *_stage_tables(stages_a, stages_b),
    ]


def _provenance(letter: str, store: RunStore) -> str:
    info = store.info()
    return (
        f"{letter}: {info.run_id}, profile {info.profile}, config hash {info.config_hash}, code "
        f"{info.code_version.label}, created {info.created_at} on {info.host}"
    )


def comparison_data(a: RunStore, b: RunStore) -> dict[str, Any]:
    """The comparison as JSON for the explorer's "Compare runs" view: each run's provenance line, the tables (heading,
    header, rows) of ``compare.md``, and per stage both runs' reward curves (``A · <loop>`` / ``B · <loop>``)."""
    check_pair(a, b)
    stages_a, stages_b = _manifests(a), _manifests(b)
    stage_folders = {m.stage: m.folder for m in (*stages_a.values(), *stages_b.values())}
    return {
        "runs": {"A": a.run_id, "B": b.run_id},
        "provenance": [_provenance("A", a), _provenance("B", b)],
        "tables": [
            {"heading": heading, "header": t.header, "rows": t.rows} for heading, t in _sections(stages_a, stages_b)
        ],
        "curves": [{"stage": label, "series": series} for label, series in _overlaid(a, b, stage_folders)],
    }


def _fill(a: RunStore, b: RunStore, folder: Path) -> ReportFiles:
    info_a, info_b = a.info(), b.info()
    stages_a, stages_b = _manifests(a), _manifests(b)
    page = Page(f"rl-recipe: {info_a.run_id} (A) vs {info_b.run_id} (B)")
    for letter, store in (("A", a), ("B", b)):
        page.text(_provenance(letter, store))
    for heading, table in _sections(stages_a, stages_b):
        page.section(heading, table)
    stage_folders = {m.stage: m.folder for m in (*stages_a.values(), *stages_b.values())}
    charts = _draw_curves(a, b, stage_folders, folder)
    if charts:
        page.section("Training curves")
    for name, path, link in charts:
        page.figure(name, path, link)
    (folder / MARKER).write_text(f"{info_a.run_id} vs {info_b.run_id}\n")
    return page.write(folder, "compare")


def summary_tables(a: RunStore, b: RunStore) -> list[tuple[str, Table]]:
    """The comparison's first tables (stages, gates): what ``recipe compare`` prints."""
    check_pair(a, b)
    return _sections(_manifests(a), _manifests(b))[:2]


def write_comparison(a: RunStore, b: RunStore, out: Path) -> ReportFiles:
    """Write the comparison of ``a`` and ``b`` into ``out`` (module docstring); returns the files as they will be
    once swapped in."""
    check_pair(a, b)
    out = Path(os.path.abspath(out))
    for store in (a, b):
        if out.resolve().is_relative_to(store.root.resolve()):
            raise CompareError(f"{out} is inside run {store.run_id}: write the comparison outside both runs")
    check_replaceable(out, MARKER, OWNED, "a comparison")
    with staged_dir(out) as folder:
        _fill(a, b, folder)
    return ReportFiles(out / "compare.md", out / "compare.html")
