"""The explorer's query layer: every question the page asks of a run, as parameterized SQL over its catalog.

Nothing here loads a table whole: the trajectory list is one ``LIMIT/OFFSET`` page plus a ``count(*)`` with the same
``WHERE``; facets and per-tool numbers are DuckDB group-bys; a trajectory's tokens are read for that one id. User
values only ever travel as ``?`` parameters; the SQL text is built from fixed column names (the sort key comes from
the ``SORTS`` whitelist), so a hostile filter value is just a value that matches nothing.

The catalog is opened read-only for each answer and closed at once (``CatalogReader``; an answer's queries share one
connection): DuckDB lets one process write a file, and that process is the pipeline's flow, which opens the file for
each append — holding a read connection open would lock it out of a run that is still going.

    explorer = Explorer(RunStore.open(Path("runs"), run_id))
    page = explorer.trajectories(TrajectoryFilter(stage="derisk", tool="pdf_read_pdf"), Page(sort="reward"))
    page["total"], page["rows"][0]["task_id"]
"""

from __future__ import annotations

import functools
import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from envs.diagnostics import ADVICE_BY_SIGNATURE
from envs.errors import RecipeError
from tasks.explorer.selection import SAMPLE_COLUMNS
from tasks.explorer.tokens import Decoder, trajectory_view
from tasks.run_store import RunStore, RunStoreError, StageManifest
from tasks.tracking.state import links as tracker_links

T = TypeVar("T")
KNOWN_GOOD_SOURCES = ("oracle", "probe")
"""Tool-call sources whose arguments are right by construction (``tasks.derisk.KNOWN_GOOD``; that module imports
Prefect, which the explorer must not)."""
MODEL_ERROR_ADVICE = "model error: RL can fix it"
MAX_INVENTED = 20
"""Most invented tool names listed under the unknown-tool row (the most called first)."""
LIST_COLUMNS = (
    "id", "stage", "source", "policy", "step", "task_id", "domain", "tier", "harness", "sample_index", "reward",
    "passed", "stop_reason", "error_class", "n_tokens", "n_generated", "n_turns", "n_tool_calls",
    "weight_version_min", "weight_version_max", "llm_s", "env_s",
)  # fmt: skip
"""What a list row shows: every scalar of a trajectory but its token lists, error text and answer."""
SORTS = {"id": "id", "reward": "reward", "length": "n_tokens", "turns": "n_turns", "tool_calls": "n_tool_calls"}
"""Sort keys the page offers → the column they order by (the only user input that reaches SQL text, via this map)."""
TRAJECTORY_FACETS = ("stage", "source", "policy", "domain", "tier", "stop_reason", "error_class")
CALL_FACETS = ("tool",)
FACET_LIMIT = 200
"""Most values listed per facet (the most frequent first); the filters take any value."""
COLUMN_FILTERS = ("stage", "source", "policy", "domain", "tier", "stop_reason", "error_class")
"""Filters that compare a trajectory column for equality."""
TEXT_FILTERS = (*COLUMN_FILTERS, "task", "tool", "call_error")
COUNTED_TABLES = ("trajectories", "tool_calls", "turns", "train_steps", "evals")
MAX_PAGE = 500
DEFAULT_PAGE = 50
MAX_OFFSET = 2**31
"""Beyond any catalog's row count, and well inside the 64-bit integer DuckDB binds OFFSET to."""
MAX_COMPARE = 200
MAX_SIGNATURES = 20
MAX_STEPS = 20_000
LOCK_TIMEOUT_S = 10.0
INT64 = range(-(2**63), 2**63)
"""What a DuckDB BIGINT holds (ids, versions, offsets): a number past it is refused before it reaches a query."""
IN_IDS = "IN (SELECT unnest(?::BIGINT[]))"
"""``id IN`` a list of ids bound as one parameter."""


class QueryError(RecipeError, ValueError):
    """A filter, sort or page the explorer cannot run; the message names the parameter."""


class CallStatus(StrEnum):
    """Which of a trajectory's tool calls the tool / signature filters look at."""

    ANY = "any"
    FAILED = "failed"
    EMPTY = "empty"  # ok and returned nothing
    TIMEOUT = "timeout"


_CALL_CONDITION = {
    CallStatus.ANY: "",
    CallStatus.FAILED: " AND NOT ok",
    CallStatus.EMPTY: " AND ok AND returned_empty",
    CallStatus.TIMEOUT: " AND timed_out",
}


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    return value if value not in (None, "") else None


def _number(params: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    value = _text(params, name)
    if value is None:
        return None
    try:
        number = kind(value)
    except ValueError:
        raise QueryError(f"{name} must be a{'n integer' if kind is int else ' number'}, not {value!r}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise QueryError(f"{name} must be finite, not {value!r}")
    if isinstance(number, int) and number not in INT64:
        raise QueryError(f"{name} must be an integer DuckDB can hold (|n| < 2**63), not {value}")
    return number


@dataclass(frozen=True)
class TrajectoryFilter:
    """The list's filters; None means "any". Values are compared as data, never spliced into SQL."""

    stage: str | None = None
    source: str | None = None
    policy: str | None = None
    task: str | None = None
    """A part of the task id."""
    domain: str | None = None
    tier: str | None = None
    stop_reason: str | None = None
    error_class: str | None = None
    """The trajectory's error class (retryable_infra | model | task)."""
    tool: str | None = None
    """Has a call of this tool (narrowed by ``call`` and ``call_error``)."""
    call: CallStatus = CallStatus.ANY
    call_error: str | None = None
    """Has a failed call with this error signature (``ToolCallRecord.error_class``, e.g. ModuleNotFoundError)."""
    reward_min: float | None = None
    reward_max: float | None = None
    weight_version: int | None = None
    """Generated (in part) by this weights version."""

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TrajectoryFilter:
        """From query-string parameters named like the fields (unknown ones are ignored: the page's sort and page)."""
        texts = {name: _text(params, name) for name in TEXT_FILTERS}
        call = _text(params, "call") or CallStatus.ANY.value
        if call not in CallStatus.__members__.values():
            raise QueryError(f"call must be one of {', '.join(CallStatus)}, not {call!r}")
        return cls(
            **texts,
            call=CallStatus(call),
            reward_min=_number(params, "reward_min", float),
            reward_max=_number(params, "reward_max", float),
            weight_version=_number(params, "weight_version", int),
        )

    def where(self) -> tuple[str, list[Any]]:
        """``WHERE ...`` (or "") over ``trajectories`` and its parameters, in order."""
        clauses, params = [], []
        for column in COLUMN_FILTERS:
            value = getattr(self, column)
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if self.task is not None:
            clauses.append("contains(task_id, ?)")
            params.append(self.task)
        if self.reward_min is not None:
            clauses.append("reward >= ?")
            params.append(self.reward_min)
        if self.reward_max is not None:
            clauses.append("reward <= ?")
            params.append(self.reward_max)
        if self.weight_version is not None:
            clauses.append("weight_version_min <= ? AND weight_version_max >= ?")
            params += [self.weight_version, self.weight_version]
        if self.tool is not None or self.call_error is not None or self.call is not CallStatus.ANY:
            inner = "trajectory_id IS NOT NULL" + _CALL_CONDITION[self.call]
            inner_params: list[Any] = []
            if self.stage is not None:
                inner += " AND stage = ?"
                inner_params.append(self.stage)
            if self.tool is not None:
                inner += " AND tool = ?"
                inner_params.append(self.tool)
            if self.call_error is not None:
                inner += " AND NOT ok AND error_class = ?"
                inner_params.append(self.call_error)
            clauses.append(f"id IN (SELECT trajectory_id FROM tool_calls WHERE {inner})")
            params += inner_params
        return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


@dataclass(frozen=True)
class Page:
    sort: str = "id"
    descending: bool = False
    limit: int = DEFAULT_PAGE
    offset: int = 0

    def __post_init__(self) -> None:
        if self.sort not in SORTS:
            raise QueryError(f"sort must be one of {', '.join(SORTS)}, not {self.sort!r}")
        if not 1 <= self.limit <= MAX_PAGE:
            raise QueryError(f"limit must be between 1 and {MAX_PAGE}, not {self.limit}")
        if self.offset < 0:
            raise QueryError(f"offset must be 0 or more, not {self.offset}")
        if self.offset > MAX_OFFSET:
            raise QueryError(f"offset must be at most {MAX_OFFSET}, not {self.offset}")

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> Page:
        order = _text(params, "order") or "asc"
        if order not in ("asc", "desc"):
            raise QueryError(f"order must be asc or desc, not {order!r}")
        limit = _number(params, "limit", int)
        offset = _number(params, "offset", int)
        return cls(
            sort=_text(params, "sort") or "id",
            descending=order == "desc",
            limit=DEFAULT_PAGE if limit is None else limit,
            offset=offset or 0,
        )

    def order_by(self) -> str:
        direction = "DESC" if self.descending else "ASC"
        return f"ORDER BY {SORTS[self.sort]} {direction} NULLS LAST, id {direction}"


class CatalogReader:
    """Read-only queries on a catalog file, on short connections (see the module docstring).

    Each ``rows`` call opens and closes its own connection, unless the calling thread is inside ``session()``: then
    the session's one connection answers (opening one costs ~30 ms, far more than a page's queries). A query that
    finds the file locked by the writer waits for it (up to ``lock_timeout_s``); a missing file reads as empty tables
    (a run whose first stage has not written yet)."""

    def __init__(self, path: Path, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.path = path
        self.lock_timeout_s = lock_timeout_s
        self._local = threading.local()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout_s
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=True)
            except duckdb.IOException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    @contextmanager
    def session(self) -> Iterator[None]:
        """The queries of this thread inside share one connection, closed at the end (nested sessions reuse it)."""
        if getattr(self._local, "con", None) is not None or not self.path.is_file():
            yield
            return
        self._local.con = self._connect()
        try:
            yield
        finally:
            self._local.con.close()
            self._local.con = None

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self.session():
            con = getattr(self._local, "con", None)
            if con is None:  # no catalog file yet
                return []
            cursor = con.execute(sql, list(params))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _one_connection(method: Callable[..., T]) -> Callable[..., T]:
    """An ``Explorer`` method whose queries share one catalog connection (``CatalogReader.session``)."""

    @functools.wraps(method)
    def wrapper(self: Explorer, *args: Any, **kwargs: Any) -> T:
        with self.catalog.session():
            return method(self, *args, **kwargs)

    return wrapper


def clean(value: Any) -> Any:
    """``value`` as strict JSON data: NaN and infinities become None (JavaScript's JSON.parse refuses them)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def _json(text: str | None, default: Any) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@functools.cache
def registry_tools() -> tuple[str, ...]:
    """The tools the MCP gateway serves, by the names a model calls them (``mcp_name`` of each ``envs.apps.TOOLS``
    operation). A call of any other tool — unless an oracle or probe called it too (a task's own tool) — is a name
    the model invented: a model error, not a broken tool. Imported on the first tool report: the apps pull in
    office-file libraries (~1 s) that the explorer's start never needs."""
    from envs.apps import TOOLS
    from envs.mcp.servers import mcp_name

    return tuple(sorted(mcp_name(name) for name in TOOLS))


def _by_trajectory(rows: list[dict[str, Any]]) -> dict[Any, list[dict[str, Any]]]:
    """Rows grouped by their ``trajectory_id`` (taken out of each row), in order."""
    grouped: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row.pop("trajectory_id"), []).append(row)
    return grouped


def _stage_summary(m: StageManifest) -> dict[str, Any]:
    gate = m.gate or {}
    scalars = {k: v for k, v in m.metrics.items() if isinstance(v, int | float | str | bool) or v is None}
    return {
        "stage": m.stage,
        "folder": m.folder,
        "status": m.status.value,
        "attempt": m.attempt,
        "started_at": m.started_at,
        "finished_at": m.finished_at,
        "duration_s": m.duration_s,
        "error": m.error,
        "passed": gate.get("passed"),
        "criteria": gate.get("criteria", []),
        "findings": gate.get("findings", []),
        "metrics": scalars,
        "tables": m.tables(),
        "outputs": {k: v for k, v in m.outputs.items() if isinstance(v, str | int | float | bool)},
        "timings": m.timings,
    }


class Explorer:
    """The questions the page asks of one run (each answer is plain JSON data)."""

    def __init__(self, store: RunStore, decoder: Decoder | None = None) -> None:
        self.store = store
        self.catalog = CatalogReader(store.catalog_path)
        self.decoder = decoder

    # --- the run ------------------------------------------------------------------------------------------------

    def manifests(self) -> list[StageManifest]:
        try:
            return self.store.manifests()
        except RunStoreError:
            return []

    @_one_connection
    def overview(self) -> dict[str, Any]:
        """The run (provenance), its stages with their gate reports, row counts and the filter facets."""
        info = self.store.info()
        counts = self.catalog.rows("SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in COUNTED_TABLES))
        per_stage = {
            r["stage"]: r["n"]
            for r in self.catalog.rows("SELECT stage, count(*) AS n FROM trajectories GROUP BY stage ORDER BY stage")
        }
        stages = [_stage_summary(m) | {"trajectories": per_stage.get(m.stage, 0)} for m in self.manifests()]
        return clean(
            {
                "run": {
                    "run_id": info.run_id,
                    "profile": info.profile,
                    "created_at": info.created_at,
                    "config_hash": info.config_hash,
                    "code": info.code_version.model_dump(),
                    "host": info.host,
                    "history": [c.model_dump() for c in info.history],
                },
                "stages": stages,
                "counts": counts[0] if counts else {},
                "facets": self.facets(),
                "decoded": self.decoder is not None,
                "trackers": tracker_links(self.store.root),
            }
        )

    @_one_connection
    def facets(self, ids: Sequence[int] | None = None) -> dict[str, Any]:
        """Values (with counts, the most frequent first) the list's filters offer, and the weights-version range.
        Tool facets count the calls made in trajectories (the list cannot show an oracle's or probe's); with
        ``ids``, only those trajectories and their calls count (what a static export holds)."""
        with_, params = "WITH t AS (FROM trajectories), c AS (FROM tool_calls WHERE trajectory_id IS NOT NULL)", []
        if ids is not None:
            with_ = f"""WITH t AS (FROM trajectories WHERE id {IN_IDS}),
                             c AS (FROM tool_calls WHERE trajectory_id {IN_IDS})"""
            params = [list(ids), list(ids)]
        parts = [
            f"SELECT '{c}' AS facet, {c}::VARCHAR AS value, count(*) AS n FROM t WHERE {c} IS NOT NULL GROUP BY {c}"
            for c in TRAJECTORY_FACETS
        ]
        parts += [
            f"SELECT '{c}' AS facet, {c} AS value, count(*) AS n FROM c WHERE {c} IS NOT NULL GROUP BY {c}"
            for c in CALL_FACETS
        ]
        parts.append(
            "SELECT 'call_error' AS facet, error_class AS value, count(*) AS n FROM c "
            "WHERE NOT ok AND error_class IS NOT NULL GROUP BY error_class"
        )
        sql = f"""{with_} SELECT facet, value, n FROM (
                      SELECT *, row_number() OVER (PARTITION BY facet ORDER BY n DESC, value) AS rank
                      FROM ({" UNION ALL ".join(parts)}))
                  WHERE rank <= {FACET_LIMIT} ORDER BY facet, value"""
        facets: dict[str, Any] = {name: [] for name in (*TRAJECTORY_FACETS, *CALL_FACETS, "call_error")}
        for row in self.catalog.rows(sql, params):
            facets[row["facet"]].append({"value": row["value"], "n": row["n"]})
        versions = self.catalog.rows(
            f"{with_} SELECT min(weight_version_min) AS low, max(weight_version_max) AS high FROM t", params
        )
        facets["weight_version"] = versions[0] if versions else {"low": None, "high": None}
        return facets

    # --- trajectories -------------------------------------------------------------------------------------------

    @_one_connection
    def trajectories(self, where: TrajectoryFilter, page: Page) -> dict[str, Any]:
        """One page of list rows and the number of rows the filter matches."""
        sql_where, params = where.where()
        total = self.catalog.rows(f"SELECT count(*) AS n FROM trajectories {sql_where}", params)
        rows = self.catalog.rows(
            f"SELECT {', '.join(LIST_COLUMNS)} FROM trajectories {sql_where} {page.order_by()} LIMIT ? OFFSET ?",
            [*params, page.limit, page.offset],
        )
        return clean({"total": total[0]["n"] if total else 0, "offset": page.offset, "limit": page.limit, "rows": rows})

    def trajectory(self, trajectory_id: int) -> dict[str, Any] | None:
        """One trajectory turn by turn (``tokens.trajectory_view``), or None when there is no such id (one past
        what a BIGINT holds included: the catalog cannot hold it, so there is none)."""
        if trajectory_id not in INT64:
            return None
        return self.trajectory_views([trajectory_id]).get(trajectory_id)

    @_one_connection
    def trajectory_views(self, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
        """Several trajectories turn by turn, by id, in three queries (a static export writes thousands: one
        connection and three queries per trajectory cost ~40 ms each)."""
        params = [list(ids)]
        found = self.catalog.rows(f"SELECT * FROM trajectories WHERE id {IN_IDS}", params)
        turns = self.catalog.rows(
            "SELECT trajectory_id, turn, start_pos, end_pos, finish_reason, weight_version FROM turns "
            f"WHERE trajectory_id {IN_IDS} ORDER BY trajectory_id, start_pos",
            params,
        )
        calls = self.catalog.rows(
            "SELECT trajectory_id, turn, tool, args, ok, error_class, error, returned_empty, timed_out, latency_s "
            f"FROM tool_calls WHERE trajectory_id {IN_IDS} ORDER BY trajectory_id, turn, rowid",
            params,
        )
        for call in calls:
            call["args"] = _json(call["args"], {})
        turns_by_id, calls_by_id = _by_trajectory(turns), _by_trajectory(calls)
        return {
            row["id"]: clean(trajectory_view(row, turns_by_id.get(row["id"], []), calls_by_id.get(row["id"], []),
                                             self.decoder))
            for row in found
        }  # fmt: skip

    @_one_connection
    def list_rows_with_calls(self, ids: Sequence[int]) -> list[dict[str, Any]]:
        """The list rows of these trajectories, each with its distinct tool calls in short form ``[tool, ok,
        returned_empty, timed_out, error_class]``: what a static page's tool filters read."""
        rows = self.catalog.rows(
            f"SELECT {', '.join(LIST_COLUMNS)} FROM trajectories WHERE id {IN_IDS} ORDER BY id", [list(ids)]
        )
        calls = _by_trajectory(
            self.catalog.rows(
                "SELECT DISTINCT trajectory_id, tool, ok, returned_empty, timed_out, error_class FROM tool_calls "
                f"WHERE trajectory_id {IN_IDS} ORDER BY ALL",
                [list(ids)],
            )
        )
        return clean([row | {"calls": [list(c.values()) for c in calls.get(row["id"], [])]} for row in rows])

    def sample_rows(self) -> list[dict[str, Any]]:
        """Every trajectory's id and what ``selection.choose_sample`` strata it by (no token lists: ~0.1 s at 100k)."""
        return self.catalog.rows(f"SELECT {', '.join(SAMPLE_COLUMNS)} FROM trajectories ORDER BY id")

    def compare(self, task_id: str) -> dict[str, Any]:
        """Every trajectory of one task (by policy, stage and source), for base vs trained side by side."""
        rows = self.catalog.rows(
            f"SELECT {', '.join(LIST_COLUMNS)} FROM trajectories WHERE task_id = ? "
            "ORDER BY policy, stage, source, sample_index, id LIMIT ?",
            [task_id, MAX_COMPARE],
        )
        return clean({"task_id": task_id, "rows": rows})

    # --- tools --------------------------------------------------------------------------------------------------

    @_one_connection
    def tools(self, stage: str | None = None) -> dict[str, Any]:
        """Per real tool (``registry_tools``): calls, failure rates (all, known-good, the model's), empty-on-success,
        timeouts, latency; the calls of tools the model invented as one ``unknown`` row (None when there are none)
        with the names it used; the top error signatures by tool and source with the advice (``envs.diagnostics``),
        an invented tool's under tool None."""
        where, params = ("WHERE stage = ?", [stage]) if stage else ("", [])
        good = ", ".join(f"'{s}'" for s in KNOWN_GOOD_SOURCES)
        calls = f"""WITH calls AS (
                        SELECT * REPLACE (CASE WHEN tool IN (SELECT unnest(?::VARCHAR[]))
                                                 OR tool IN (SELECT tool FROM tool_calls WHERE source IN ({good}))
                                               THEN tool END AS tool), tool AS called
                        FROM tool_calls {where})"""
        params = [list(registry_tools()), *params]
        tools = self.catalog.rows(
            f"""{calls} SELECT tool, count(*) AS calls, count(trajectory_id) AS in_trajectories,
                       count(*) FILTER (WHERE NOT ok) AS failures,
                       avg((NOT ok)::INT) AS failure_rate,
                       avg((NOT ok)::INT) FILTER (WHERE source IN ({good})) AS known_good_failure_rate,
                       avg((NOT ok)::INT) FILTER (WHERE source NOT IN ({good})) AS model_failure_rate,
                       count(*) FILTER (WHERE ok AND returned_empty) AS empty,
                       (count(*) FILTER (WHERE ok AND returned_empty))::DOUBLE
                           / nullif(count(*) FILTER (WHERE ok), 0) AS empty_rate,
                       count(*) FILTER (WHERE timed_out) AS timeouts, avg(timed_out::INT) AS timeout_rate,
                       avg(latency_s) AS latency_mean, quantile_cont(latency_s, 0.95) AS latency_p95,
                       mode(error_class) FILTER (WHERE NOT ok) AS top_signature
                FROM calls GROUP BY tool ORDER BY tool IS NOT NULL, failures DESC, empty DESC, tool LIMIT ?""",
            [*params, FACET_LIMIT + 1],
        )
        unknown = tools.pop(0) if tools and tools[0]["tool"] is None else None
        if unknown is not None:
            unknown["names"] = self.catalog.rows(
                f"""{calls} SELECT called AS tool, count(*) AS calls, count(trajectory_id) AS in_trajectories
                    FROM calls WHERE tool IS NULL GROUP BY called ORDER BY calls DESC, called LIMIT ?""",
                [*params, MAX_INVENTED],
            )
        signatures = self.catalog.rows(
            f"""{calls} SELECT error_class AS signature, tool, source, count(*) AS calls,
                       count(trajectory_id) AS in_trajectories, any_value(error) AS example
                FROM calls WHERE NOT ok
                GROUP BY error_class, tool, source ORDER BY calls DESC, signature, tool, source LIMIT ?""",
            [*params, MAX_SIGNATURES],
        )
        for row in signatures:
            known_good = row["source"] in KNOWN_GOOD_SOURCES
            row["advice"] = ADVICE_BY_SIGNATURE.get(row["signature"] or "", "") if known_good else MODEL_ERROR_ADVICE
            row["example"] = (row["example"] or "")[:300]
        return clean({"stage": stage, "tools": tools, "unknown": unknown, "signatures": signatures})

    # --- curves and tables --------------------------------------------------------------------------------------

    @_one_connection
    def curves(self) -> dict[str, Any]:
        """Train steps (reward, pass rate, eval points) per stage and run; eval summaries; the stages' tables."""
        steps = self.catalog.rows(
            """SELECT stage, run, step, reward_mean, pass_rate, eval_reward, eval_pass_rate, trajectories, loss,
                      wall_s FROM train_steps ORDER BY stage, run, step LIMIT ?""",
            [MAX_STEPS],
        )
        evals = self.catalog.rows(
            """SELECT stage, suite, policy, count(DISTINCT task_id) AS tasks, count(DISTINCT pass_index) AS passes,
                      count(*) AS trials, avg(passed::INT) AS pass_at_1, avg(reward) AS mean_reward
               FROM evals GROUP BY stage, suite, policy ORDER BY min(rowid) LIMIT ?""",
            [FACET_LIMIT],
        )
        tables = [
            {"stage": m.stage, "folder": m.folder, "name": name, "rows": rows}
            for m in self.manifests()
            for name, rows in m.tables().items()
        ]
        return clean({"steps": steps, "evals": evals, "tables": tables})
