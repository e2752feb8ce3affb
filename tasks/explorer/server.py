"""The explorer's HTTP server: the page and a small JSON API over one run, on loopback only.

Routes (GET; every answer is JSON from ``queries.Explorer`` except the page and its assets):

==============================  =====================================================================================
``/``                           the page (``static/index.html``); ``/static/*`` its script and style
``/api/run``                    the run, its stages with their gate reports, row counts, filter facets
``/api/trajectories``           one page of the list: the filters of ``TrajectoryFilter`` + ``sort``, ``order``,
                                ``limit``, ``offset`` as query parameters → ``{total, offset, limit, rows}``
``/api/trajectories/{id}``      one trajectory turn by turn (404 when there is no such id)
``/api/compare?task_id=``       every trajectory of one task (base vs trained side by side)
``/api/tools?stage=``           per-tool numbers (names the model invented: one ``unknown`` row) and the top error
                                signatures with advice
``/api/curves``                 train steps, eval summaries, the stages' tables (ablation arms, transfer suites)
``/api/runs``                   the other runs beside this one (its runs root), newest first: what it compares with
``/api/compare-runs?with=``     this run (A) vs another of them (B), as ``recipe compare A B``: stages, every gate
                                criterion, metrics B − A, the stages' tables, both runs' curves per stage
==============================  =====================================================================================

A bad parameter answers 400 with ``{"error": message}``; a request another site's page sends (an ``Origin`` not the
server's own, a DNS-rebound ``Host``: ``envs.net.LocalSiteGuard``) answers 403 in the same shape. Handlers are plain
functions: Starlette runs them in its thread pool, and each answer opens its own read-only connection
(``queries.CatalogReader``). No Prefect import here.

    uvicorn.run(create_app(Explorer(store, decoder)), host="127.0.0.1", port=8765)
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from envs.errors import RecipeError
from envs.net import LocalSiteGuard
from tasks.explorer.comparison import comparison_data
from tasks.explorer.queries import Explorer, Page, QueryError, TrajectoryFilter, clean
from tasks.run_store import RunInfo, RunStore, all_runs

STATIC_DIR = Path(__file__).resolve().parent / "static"
DATA_MARKER = "<!--EXPLORER_DATA-->"
"""Where the static export puts its data script into ``index.html`` (the server leaves it empty)."""
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
    "X-Content-Type-Options": "nosniff",
}


@functools.cache
def _index_html() -> str:
    return (STATIC_DIR / "index.html").read_text(encoding="utf-8")


def page_html(data_scripts: str = "") -> str:
    """``index.html`` with ``data_scripts`` at the data marker (empty: the page asks the JSON API)."""
    return _index_html().replace(DATA_MARKER, data_scripts)


def _json(content: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status, headers=HEADERS)


def create_app(explorer: Explorer) -> Starlette:
    """The Starlette app serving ``explorer`` (see the module docstring for the routes)."""

    def index(request: Request) -> Response:
        return HTMLResponse(page_html(), headers=HEADERS)

    def run(request: Request) -> Response:
        return _json(explorer.overview())

    def trajectories(request: Request) -> Response:
        params = request.query_params
        return _json(explorer.trajectories(TrajectoryFilter.from_params(params), Page.from_params(params)))

    def trajectory(request: Request) -> Response:
        found = explorer.trajectory(request.path_params["trajectory_id"])
        if found is None:
            return _json({"error": f"no trajectory {request.path_params['trajectory_id']}"}, 404)
        return _json(found)

    def compare(request: Request) -> Response:
        task_id = request.query_params.get("task_id")
        if not task_id:
            raise QueryError("compare needs a task_id")
        return _json(explorer.compare(task_id))

    def tools(request: Request) -> Response:
        return _json(explorer.tools(request.query_params.get("stage") or None))

    def curves(request: Request) -> Response:
        return _json(explorer.curves())

    def other_runs() -> dict[str, tuple[RunInfo, RunStore]]:
        """The runs beside this one, newest first: the only ones a page may name (never a path)."""
        found = all_runs(explorer.store.root.parent)[::-1]
        return {info.run_id: (info, store) for info, store in found if store.root != explorer.store.root}

    def runs(request: Request) -> Response:
        infos = [info for info, _ in other_runs().values()]
        return _json([{"run_id": i.run_id, "profile": i.profile, "created_at": i.created_at} for i in infos])

    def compare_runs(request: Request) -> Response:
        other = request.query_params.get("with", "")
        found = other_runs().get(other)
        if found is None:
            raise QueryError(f"no run {other!r} beside this one to compare with (GET /api/runs lists them)")
        try:
            return _json(clean(comparison_data(explorer.store, found[1])))
        except RecipeError as error:
            raise QueryError(str(error)) from None

    async def bad_query(request: Request, error: Exception) -> Response:
        return _json({"error": str(error)}, 400)

    routes = [
        Route("/", index),
        Route("/api/run", run),
        Route("/api/trajectories", trajectories),
        Route("/api/trajectories/{trajectory_id:int}", trajectory),
        Route("/api/compare", compare),
        Route("/api/tools", tools),
        Route("/api/curves", curves),
        Route("/api/runs", runs),
        Route("/api/compare-runs", compare_runs),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    guard = Middleware(LocalSiteGuard, refuse=lambda reason: _json({"error": reason}, 403))
    return Starlette(routes=routes, exception_handlers={QueryError: bad_query}, middleware=[guard])


def serve(explorer: Explorer, host: str, port: int) -> None:
    """Serve until interrupted (Ctrl-C)."""
    import uvicorn

    uvicorn.run(create_app(explorer), host=host, port=port, log_level="warning")
