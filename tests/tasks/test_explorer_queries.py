"""The trace explorer's query layer on a small real catalog: filters, pagination, parameterization, the turn-by-turn
view of a trajectory, the per-tool numbers by hand, curves and the stages' tables."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from envs.diagnostics import ADVICE_BY_SIGNATURE
from envs.harness.agent import context_nudge_text
from envs.types import ToolCallRecord
from tasks.catalog import Catalog, tool_call_row
from tasks.explorer.queries import (
    LIST_COLUMNS,
    MODEL_ERROR_ADVICE,
    TEXT_FILTERS,
    CallStatus,
    CatalogReader,
    Explorer,
    Page,
    QueryError,
    TrajectoryFilter,
)
from tasks.explorer.sample import INVENTED_TOOL, build_sample_run
from tasks.explorer.tokens import NUDGE_PATTERN, find_tokenizer, load_decoder, mask_runs
from tasks.run_store import RunStore

HOSTILE = [
    "'; DROP TABLE trajectories; --",
    '" OR 1=1 --',
    "%",
    "_",
    "\\",
    "ib-1' OR '1'='1",
    "$stage",
    "?",
    "ünï\u2028cødé\x00",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunStore:
    return build_sample_run(tmp_path_factory.mktemp("explorer") / "runs")


@pytest.fixture(scope="module")
def explorer(run) -> Explorer:
    return Explorer(run, load_decoder(find_tokenizer(run)))


@pytest.fixture(scope="module")
def catalog(run) -> Catalog:
    return Catalog(run.catalog_path)


def ids(explorer: Explorer, where: TrajectoryFilter, **page) -> list[int]:
    return [row["id"] for row in explorer.trajectories(where, Page(**page))["rows"]]


def sql_ids(catalog: Catalog, condition: str, params=()) -> list[int]:
    return [r["id"] for r in catalog.query(f"SELECT id FROM trajectories WHERE {condition} ORDER BY id", params)]


# --- filters --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "condition", "params"),
    [
        (TrajectoryFilter(), "true", []),
        (TrajectoryFilter(stage="overfit"), "stage = ?", ["overfit"]),
        (TrajectoryFilter(policy="trained"), "policy = ?", ["trained"]),
        (TrajectoryFilter(domain="corporate_law", tier="toy"), "domain = ? AND tier = ?", ["corporate_law", "toy"]),
        (TrajectoryFilter(task="margin"), "task_id LIKE '%margin%'", []),
        (TrajectoryFilter(reward_min=0.5, reward_max=0.5), "reward = 0.5", []),
        (TrajectoryFilter(weight_version=1), "weight_version_min <= 1 AND weight_version_max >= 1", []),
        (TrajectoryFilter(stop_reason="timeout", error_class="model"),
         "stop_reason = 'timeout' AND error_class = 'model'", []),
        (TrajectoryFilter(source="eval/heldout", stage="hero"), "source = 'eval/heldout' AND stage = 'hero'", []),
    ],
)  # fmt: skip
def test_column_filters_match_plain_sql(explorer, catalog, where, condition, params) -> None:
    expected = sql_ids(catalog, condition, params)
    assert ids(explorer, where, limit=500) == expected
    assert explorer.trajectories(where, Page())["total"] == len(expected)


def test_filters_narrow_the_sample_run(explorer) -> None:
    every = explorer.trajectories(TrajectoryFilter(), Page())["total"]
    assert every == 36
    for where in [TrajectoryFilter(stage="overfit"), TrajectoryFilter(tool="pdf_read_pdf"), TrajectoryFilter(task="3")]:
        assert 0 < explorer.trajectories(where, Page())["total"] < every


@pytest.mark.parametrize(
    ("where", "calls"),
    [
        (TrajectoryFilter(tool="slides_add_slide"), "tool = 'slides_add_slide'"),
        (TrajectoryFilter(tool="slides_add_slide", call=CallStatus.EMPTY),
         "tool = 'slides_add_slide' AND ok AND returned_empty"),
        (TrajectoryFilter(call=CallStatus.FAILED), "NOT ok"),
        (TrajectoryFilter(call=CallStatus.TIMEOUT), "timed_out"),
        (TrajectoryFilter(call_error="ModuleNotFoundError"), "NOT ok AND error_class = 'ModuleNotFoundError'"),
        (TrajectoryFilter(tool="sheets_read_cell", call_error="ToolError"),
         "tool = 'sheets_read_cell' AND NOT ok AND error_class = 'ToolError'"),
        (TrajectoryFilter(tool="pdf_read_pdf", stage="hero"), "tool = 'pdf_read_pdf' AND stage = 'hero'"),
    ],
)  # fmt: skip
def test_tool_filters_select_the_trajectories_behind_the_calls(explorer, catalog, where, calls) -> None:
    expected = sql_ids(catalog, f"id IN (SELECT trajectory_id FROM tool_calls WHERE {calls})")
    assert expected, "the sample run has such calls"
    assert ids(explorer, where, limit=500) == expected


def test_filters_from_query_parameters() -> None:
    where = TrajectoryFilter.from_params(
        {"stage": "derisk", "tool": "x", "call": "failed", "reward_min": "0.25", "weight_version": "3", "task": "",
         "sort": "reward", "offset": "50"}
    )  # fmt: skip
    expected = TrajectoryFilter(stage="derisk", tool="x", call=CallStatus.FAILED, reward_min=0.25, weight_version=3)
    assert where == expected
    page = Page.from_params({"sort": "length", "order": "desc", "limit": "25", "offset": "50"})
    assert page == Page(sort="length", descending=True, limit=25, offset=50)
    assert Page.from_params({}) == Page()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"reward_min": "abc"}, "reward_min must be a number"),
        ({"reward_max": "nan"}, "reward_max must be finite"),
        ({"weight_version": "1.5"}, "weight_version must be an integer"),
        ({"call": "'; DROP TABLE x"}, "call must be one of"),
        ({"sort": "reward; DROP TABLE trajectories"}, "sort must be one of"),
        ({"sort": "tokens"}, "sort must be one of"),
        ({"order": "desc; --"}, "order must be asc or desc"),
        ({"limit": "0"}, "limit must be between 1 and 500"),
        ({"limit": "100000"}, "limit must be between 1 and 500"),
        ({"offset": "-1"}, "offset must be 0 or more"),
    ],
)
def test_bad_parameters_are_refused_by_name(params, message) -> None:
    with pytest.raises(QueryError, match=message):
        TrajectoryFilter.from_params(params)
        Page.from_params(params)


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_filter_value_is_only_a_value(explorer, catalog, value) -> None:
    before = catalog.count("trajectories")
    for field in TEXT_FILTERS:
        page = explorer.trajectories(TrajectoryFilter(**{field: value}), Page(sort="reward", descending=True))
        assert page == {"total": 0, "offset": 0, "limit": 50, "rows": []}, field
    assert explorer.compare(value)["rows"] == []
    assert explorer.tools(value)["tools"] == []
    assert catalog.count("trajectories") == before  # nothing was dropped or changed


# --- pagination and sorting -----------------------------------------------------------------------------------------


def test_pages_cover_every_row_once_in_sort_order(explorer) -> None:
    seen, rewards = [], []
    for offset in range(0, 40, 7):
        page = explorer.trajectories(TrajectoryFilter(), Page(sort="reward", descending=True, limit=7, offset=offset))
        assert page["total"] == 36 and len(page["rows"]) == min(7, max(0, 36 - offset))
        seen += [r["id"] for r in page["rows"]]
        rewards += [r["reward"] for r in page["rows"]]
    assert sorted(seen) == list(range(1, 37))
    assert rewards == sorted(rewards, reverse=True)
    assert explorer.trajectories(TrajectoryFilter(), Page(offset=1000))["rows"] == []


def test_ties_break_by_id_and_length_sorts_by_tokens(explorer) -> None:
    rows = explorer.trajectories(TrajectoryFilter(), Page(sort="reward", limit=500))["rows"]
    assert [(r["reward"], r["id"]) for r in rows] == sorted((r["reward"], r["id"]) for r in rows)
    lengths = [r["n_tokens"] for r in explorer.trajectories(TrajectoryFilter(), Page(sort="length", limit=500))["rows"]]
    assert lengths == sorted(lengths)


def test_list_rows_carry_no_token_lists(explorer) -> None:
    [row] = explorer.trajectories(TrajectoryFilter(), Page(limit=1))["rows"]
    assert not {"tokens", "loss_mask", "logprobs", "error", "final_answer"} & set(row)


# --- one trajectory -------------------------------------------------------------------------------------------------


def test_a_trajectory_turn_by_turn_is_its_tokens_cut_at_the_loss_mask(explorer, catalog) -> None:
    [raw] = catalog.query("SELECT tokens, loss_mask FROM trajectories WHERE id = 9")
    view = explorer.trajectory(9)
    pieces = view["prompt"] + [p for turn in view["turns"] for p in turn["pieces"]]
    assert [[p["start"], p["end"], int(p["generated"])] for p in pieces] == mask_runs(raw["loss_mask"])
    assert "".join(p["text"] for p in pieces) == explorer.decoder.decode(raw["tokens"])
    assert view["masked_outside_spans"] == 0 and view["unmasked_in_spans"] == 0
    first = view["turns"][0]
    assert first["pieces"][0]["generated"] and "<tool_call>" in first["pieces"][0]["text"]
    assert first["pieces"][0]["mean_logprob"] < 0
    assert not first["pieces"][1]["generated"] and "<tool_response>" in first["pieces"][1]["text"]
    assert [c["tool"] for c in first["calls"]] == ["code_exec_run_python"]
    assert first["calls"][0]["args"] == {"code": "import pandas as pd\nprint(pd.__version__)"}
    assert [c["kind"] for c in view["criteria"]] == ["answer_numeric", "llm_judge"]
    assert view["decoded"] and "tokens" not in view


def test_the_context_nudge_is_found_where_it_fired(explorer, catalog) -> None:
    nudged = {r["id"] for r in catalog.query("SELECT id FROM trajectories WHERE stage = 'overfit' AND step = 3")}
    for trajectory_id in range(1, 37):
        nudges = [t["nudge"] for t in explorer.trajectory(trajectory_id)["turns"] if t["nudge"] is not None]
        assert nudges == ([12] if trajectory_id in nudged else []), trajectory_id


def test_the_nudge_pattern_follows_the_harness_text() -> None:
    assert NUDGE_PATTERN.search(context_nudge_text(7)).group(1) == "7"


def test_without_a_tokenizer_pieces_show_token_ids(run, catalog) -> None:
    view = Explorer(run).trajectory(1)
    [raw] = catalog.query("SELECT tokens FROM trajectories WHERE id = 1")
    assert not view["decoded"]
    assert view["prompt"][0]["text"].split()[:3] == [str(i) for i in raw["tokens"][:3]]


def test_an_unknown_trajectory_is_none(explorer) -> None:
    assert explorer.trajectory(10_000) is None


def test_views_read_together_keep_each_trajectorys_turns_and_calls(explorer) -> None:
    together = explorer.trajectory_views([1, 8, 9, 36, 10_000])
    assert sorted(together) == [1, 8, 9, 36]
    for trajectory_id in (1, 8, 9, 36):
        assert together[trajectory_id] == explorer.trajectory_views([trajectory_id])[trajectory_id]
    assert [c["tool"] for t in together[8]["turns"] for c in t["calls"]] == [
        INVENTED_TOOL,
        "sheets_read_cell",
        "slides_add_slide",
    ]


def test_list_rows_carry_their_distinct_calls_in_short_form(explorer, catalog) -> None:
    rows = explorer.list_rows_with_calls([9, 2])
    assert [r["id"] for r in rows] == [2, 9] and set(LIST_COLUMNS) < set(rows[0])
    expected = catalog.query(
        "SELECT DISTINCT tool, ok, returned_empty, timed_out, error_class FROM tool_calls WHERE trajectory_id = 9 "
        "ORDER BY ALL"
    )
    assert rows[1]["calls"] == [list(c.values()) for c in expected]


def test_compare_lists_every_policy_on_the_task(explorer) -> None:
    rows = explorer.compare("ib-3-ebitda")["rows"]
    assert {r["policy"] for r in rows} == {"base", "trained"} and {r["task_id"] for r in rows} == {"ib-3-ebitda"}


# --- tools ----------------------------------------------------------------------------------------------------------


def call(tool: str, ok: bool = True, empty: bool = False, signature: str | None = None, latency: float = 0.1):
    return ToolCallRecord(turn=0, tool=tool, ok=ok, returned_empty=empty, error_class=signature, latency_s=latency)


def test_tool_numbers_by_hand(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "t", {}, "h", run_id="r")
    catalog = Catalog(store.catalog_path)
    catalog.append(
        "tool_calls",
        [
            tool_call_row("s", "oracle", "a", "w", call("run", ok=False, signature="ModuleNotFoundError")),
            tool_call_row("s", "probe", None, "w", call("run")),
            tool_call_row("s", "base-rollouts", "a", "w", call("run", ok=False, signature="ModuleNotFoundError"), 1),
            tool_call_row("s", "base-rollouts", "a", "w", call("run"), 2),
            tool_call_row("s", "base-rollouts", "a", "w", call("write", empty=True, latency=1.0), 1),
            tool_call_row("s", "base-rollouts", "a", "w", call("write", latency=3.0), 2),
            tool_call_row("other", "oracle", "a", "w", call("write", ok=False, signature="timeout")),
        ],
    )
    report = Explorer(store).tools("s")
    run, write = report["tools"]  # most failures first
    assert (run["tool"], run["calls"], run["in_trajectories"], run["failures"]) == ("run", 4, 2, 2)
    assert (run["failure_rate"], run["known_good_failure_rate"], run["model_failure_rate"]) == (0.5, 0.5, 0.5)
    assert run["top_signature"] == "ModuleNotFoundError" and run["empty_rate"] == 0.0
    assert (write["calls"], write["failures"], write["empty_rate"], write["latency_mean"]) == (2, 0, 0.5, 2.0)
    assert write["known_good_failure_rate"] is None
    oracle, model = sorted(report["signatures"], key=lambda s: s["source"])[1], report["signatures"][0]
    assert oracle["source"] == "oracle" and oracle["advice"] == ADVICE_BY_SIGNATURE["ModuleNotFoundError"]
    assert model["source"] == "base-rollouts" and model["advice"] == MODEL_ERROR_ADVICE
    assert {t["tool"]: t["calls"] for t in Explorer(store).tools()["tools"]} == {"run": 4, "write": 3}
    assert report["unknown"] is None


def test_invented_tools_are_one_unknown_row_below_the_real_ones(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "t", {}, "h", run_id="r")
    Catalog(store.catalog_path).append(
        "tool_calls",
        [
            tool_call_row("s", "base-rollouts", "a", "w", call("pdf_read_pdf"), 1),  # a registry tool
            tool_call_row("s", "oracle", "a", "w", call("run_tests")),  # a task's own tool: an oracle called it
            tool_call_row("s", "base-rollouts", "a", "w", call("run_tests", ok=False, signature="ToolError"), 1),
            tool_call_row("s", "base-rollouts", "a", "w", call("sheets_read_file", ok=False, signature="ToolError"), 1),
            tool_call_row("s", "base-rollouts", "a", "w", call("sheets_read_file", ok=False, signature="ToolError"), 2),
            tool_call_row("s", "base-rollouts", "a", "w", call("fs_cat", ok=False, signature="ToolError", latency=4.0)),
        ],
    )  # fmt: skip
    report = Explorer(store).tools("s")
    assert [t["tool"] for t in report["tools"]] == ["run_tests", "pdf_read_pdf"]
    unknown = report["unknown"]
    assert (unknown["tool"], unknown["calls"], unknown["in_trajectories"], unknown["failures"]) == (None, 3, 2, 3)
    assert (unknown["failure_rate"], unknown["model_failure_rate"]) == (1.0, 1.0)
    assert unknown["latency_mean"] == pytest.approx((0.1 + 0.1 + 4.0) / 3)
    assert unknown["names"] == [{"tool": "sheets_read_file", "calls": 2, "in_trajectories": 2},
                                {"tool": "fs_cat", "calls": 1, "in_trajectories": 0}]  # fmt: skip
    invented = [s for s in report["signatures"] if s["tool"] is None]
    assert [(s["calls"], s["advice"]) for s in invented] == [(3, MODEL_ERROR_ADVICE)]
    assert {s["tool"] for s in report["signatures"]} == {None, "run_tests"}


def test_the_sample_runs_invented_tool_is_unknown(explorer) -> None:
    report = explorer.tools("derisk")
    assert INVENTED_TOOL not in {t["tool"] for t in report["tools"]}
    assert report["unknown"]["names"] == [{"tool": INVENTED_TOOL, "calls": 4, "in_trajectories": 4}]
    assert "sheets_read_cell" in {t["tool"] for t in report["tools"]}


# --- the run, curves, tables ----------------------------------------------------------------------------------------


def test_overview_has_stages_gates_counts_and_facets(explorer) -> None:
    o = explorer.overview()
    folders = ["1-derisk", "2-tito", "4-overfit", "5-ablations", "6-hero", "7-transfer"]
    assert [s["folder"] for s in o["stages"]] == folders
    derisk = o["stages"][0]
    assert derisk["trajectories"] == 16 and derisk["criteria"][0]["name"] == "oracle pass rate"
    assert {f["subject"] for f in derisk["findings"]} == {"slides_add_slide", "code_exec_run_python"}
    assert o["stages"][-1]["status"] == "gate_failed" and "suites" in o["stages"][-1]["tables"]
    assert o["counts"]["trajectories"] == 36 and o["counts"]["train_steps"] == 60
    facets = o["facets"]
    assert {f["value"] for f in facets["stage"]} == {"derisk", "overfit", "hero"}
    assert {"ModuleNotFoundError", "ToolError", "timeout"} <= {f["value"] for f in facets["call_error"]}
    assert facets["weight_version"] == {"low": 0, "high": 12}


def test_facets_count_the_calls_the_list_can_show_or_only_the_given_trajectories(explorer, catalog) -> None:
    def tools(condition: str) -> dict:
        sql = f"SELECT tool, count(*) AS n FROM tool_calls WHERE {condition} GROUP BY tool"
        return {r["tool"]: r["n"] for r in catalog.query(sql)}

    every = explorer.facets()
    assert {v["value"]: v["n"] for v in every["tool"]} == tools("trajectory_id IS NOT NULL")  # no oracle's calls
    some = explorer.facets([1, 2, 3, 4, 33])
    assert some["stage"] == [{"value": "derisk", "n": 4}, {"value": "hero", "n": 1}]
    assert {v["value"]: v["n"] for v in some["tool"]} == tools("trajectory_id IN (1, 2, 3, 4, 33)")
    [low] = catalog.query("SELECT min(weight_version_min) AS low, max(weight_version_max) AS high FROM trajectories "
                          "WHERE id IN (1, 2, 3, 4, 33)")  # fmt: skip
    assert some["weight_version"] == low


def test_curves_and_tables(explorer) -> None:
    data = explorer.curves()
    assert len(data["steps"]) == 60 and sum(s["eval_reward"] is not None for s in data["steps"]) == 12
    assert {s["run"] for s in data["steps"] if s["stage"] == "ablations"} == {
        "baseline",
        "dppo",
        "dppo_prompt_mean_nudge",
    }
    heldout = {e["policy"]: e for e in data["evals"]}
    assert heldout["base"]["trials"] == 4 and heldout["base"]["tasks"] == 2 and heldout["base"]["passes"] == 2
    assert {(t["stage"], t["name"]) for t in data["tables"]} == {("ablations", "arms"), ("transfer", "suites")}


def test_a_run_without_a_catalog_reads_as_empty(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "t", {}, "h", run_id="r")
    explorer = Explorer(store)
    assert explorer.trajectories(TrajectoryFilter(), Page())["total"] == 0
    assert explorer.overview()["stages"] == [] and explorer.trajectory(1) is None


@contextmanager
def held(path: Path, seconds: float):
    """Another process holds ``path`` open for writing for ``seconds`` (as the flow does while it appends)."""
    code = f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); time.sleep({seconds})"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "held"
        yield
    finally:
        process.kill()
        process.wait(timeout=10)
        process.stdout.close()


def test_a_read_waits_for_the_writer_then_lets_go_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog(path).append("gates", [{"stage": "s", "criterion": "c"}])
    with held(path, 1.0):
        started = time.monotonic()
        assert CatalogReader(path).rows("SELECT count(*) AS n FROM gates") == [{"n": 1}]
        assert time.monotonic() - started > 0.3  # it waited for the writer's lock to go
    Catalog(path).append("gates", [{"stage": "s", "criterion": "d"}])  # and holds no connection after the query


def test_a_read_gives_up_on_a_writer_that_keeps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "catalog.duckdb"
    Catalog(path)
    with held(path, 30.0), pytest.raises(duckdb.IOException):
        CatalogReader(path, lock_timeout_s=0.3).rows("SELECT 1")
