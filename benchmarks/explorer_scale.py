"""Trace explorer at scale: a synthetic run with 100k trajectories, served by the real ``recipe view`` process, and
the HTTP requests the page makes — time to first page (target < 2 s), paging deep into the list, filters, opening a
trajectory, the tool report and the curves.

The run is built for speed with DuckDB bulk inserts (``INSERT … SELECT … FROM range(n)``) into the tables
``tasks.catalog.Catalog`` creates, so every row has the catalog's schema: ``--trajectories`` rollouts of 2–6 turns
(about 300–500 tokens each, loss mask and logprobs included), their turns and tool calls (8 tools, some failing,
some empty, some timing out), oracle / probe calls, train steps and evals; manifests for de-risk, overfit and hero.
The tokens are decoded with a tiny tokenizer trained here (``trainer.tokenizer``), as a real run's would be.

Times are wall-clock milliseconds of one HTTP request each from this process (the median of ``--repeats``), on a
server started fresh: "cold start" is process start → first answer; "open" is the page's own requests in order
(``/``, its script and style, ``/api/run``, the first list page).

    .venv/bin/python benchmarks/explorer_scale.py --trajectories 100000
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import httpx

from envs.net import free_port
from tasks.catalog import Catalog
from tasks.run_store import RunStore, StageManifest, StageStatus

REPO = Path(__file__).resolve().parent.parent
TOOLS = ["filesystem_read_file", "pdf_read_pdf", "sheets_read_cell", "sheets_write_cell", "slides_add_slide",
         "docs_write", "code_exec_run_python", "mail_search"]  # fmt: skip
TARGET_OPEN_S = 2.0
SAMPLED = "CASE WHEN x >= 120 AND (x - 120) % 80 < 40"
"""Token positions the model sampled: a 120-token prompt, then per turn 40 sampled and 40 observation tokens."""


def build_run(runs_root: Path, n: int) -> RunStore:
    from trainer.tokenizer import save_tokenizer, train_tokenizer

    store = RunStore.create(runs_root, "scale", {"profile": "scale"}, "scale", run_id="scale")
    tokenizer = train_tokenizer([f"tool call {i} result revenue" for i in range(300)], 600)
    policy = save_tokenizer(tokenizer, store.root / "policy")
    criterion = {"name": "criterion", "measured": 1.0, "op": ">=", "threshold": 0.5, "passed": True, "detail": ""}
    for stage, folder in (("derisk", "1-derisk"), ("overfit", "4-overfit"), ("hero", "6-hero")):
        gate = {"stage": stage, "passed": True, "findings": [], "criteria": [criterion]}
        outputs = {"policy": str(policy)} if stage == "derisk" else {}
        store.write_manifest(
            StageManifest(stage=stage, folder=folder, status=StageStatus.PASSED, gate=gate, outputs=outputs)
        )
    Catalog(store.catalog_path)  # the schema
    tools = "[" + ", ".join(f"'{t}'" for t in TOOLS) + "]"
    con = duckdb.connect(str(store.catalog_path))
    con.execute(
        f"""INSERT INTO trajectories (id, stage, source, policy, step, task_id, world_id, domain, tier, split, group_id,
                sample_index, harness, reward, passed, stop_reason, error_class, prompt_len, n_tokens, n_generated,
                n_turns, n_tool_calls, weight_version_min, weight_version_max, llm_s, env_s, final_answer, criteria,
                tokens, loss_mask, logprobs)
            SELECT id, stage, source, policy, step, task_id, 'world-' || (task % 40), domain, tier, 'train',
                   'g-' || task, id % 8, 'mcp', reward, reward > 0.8, stop_reason, error_class, 120, n_tokens,
                   (n_turns * 40), n_turns, n_turns - 1, version, version, 1.5, 0.3, 'answer ' || id,
                   '[{{"kind": "answer_numeric", "passed": true, "detail": ""}}]',
                   list_transform(range(n_tokens), lambda x: ((x * 31 + id) % 590 + 3)::INTEGER),
                   list_transform(range(n_tokens), lambda x: {SAMPLED} THEN 1 ELSE 0 END)::TINYINT[],
                   list_transform(range(n_tokens), lambda x: {SAMPLED} THEN -0.5 ELSE 0 END)::FLOAT[]
            FROM (SELECT i + 1 AS id, i % 2000 AS task, 'task-' || (i % 2000) AS task_id,
                         ['derisk', 'overfit', 'overfit', 'hero'][i % 4 + 1] AS stage,
                         ['base-rollouts', 'train/overfit', 'train/overfit', 'eval/heldout'][i % 4 + 1] AS source,
                         ['base', 'overfit', 'overfit', ['base', 'trained'][i % 2 + 1]][i % 4 + 1] AS policy,
                         CASE WHEN i % 4 IN (1, 2) THEN (i // 400) % 200 END AS step,
                         ['investment_banking', 'management_consulting', 'corporate_law'][i % 3 + 1] AS domain,
                         ['toy', 'standard', 'deliverable'][i % 5 % 3 + 1] AS tier,
                         (hash(i) % 1001) / 1000.0 AS reward,
                         ['stop', 'stop', 'stop', 'stop', 'stop', 'stop', 'length', 'timeout', 'error',
                          'context_length'][i % 10 + 1] AS stop_reason,
                         [NULL, NULL, NULL, NULL, NULL, NULL, 'model', 'model', 'retryable_infra',
                          'model'][i % 10 + 1] AS error_class,
                         2 + i % 5 AS n_turns, 120 + (2 + i % 5) * 80 AS n_tokens, (i // 400) % 200 AS version
                  FROM range({n}) r(i))"""
    )
    con.execute(
        """INSERT INTO turns SELECT t.id, t.stage, k, 120 + k * 80, 160 + k * 80, 'stop', t.weight_version_min
           FROM trajectories t, range(6) r(k) WHERE k < t.n_turns"""
    )
    con.execute(
        f"""INSERT INTO tool_calls (trajectory_id, stage, source, task_id, world_id, turn, tool, args, ok, error_class,
                error, returned_empty, timed_out, latency_s)
            SELECT t.id, t.stage, t.source, t.task_id, t.world_id, k, tool, '{{"path": "notes/file.txt"}}', ok,
                   CASE WHEN NOT ok THEN ['ToolError', 'ModuleNotFoundError', 'timeout'][(t.id + k) % 3 + 1] END,
                   CASE WHEN NOT ok THEN 'error text of call ' || k END,
                   ok AND tool = 'slides_add_slide', NOT ok AND (t.id + k) % 3 = 2, 0.05 + (t.id % 7) / 10
            FROM (SELECT *, {tools}[(id + k) % 8 + 1] AS tool, (hash(id * 7 + k) % 10) <> 0 AS ok
                  FROM trajectories, range(6) r(k) WHERE k < n_turns - 1) t"""
    )
    con.execute(
        f"""INSERT INTO tool_calls (stage, source, task_id, world_id, turn, tool, args, ok, error_class, returned_empty,
                timed_out, latency_s)
            SELECT 'derisk', ['oracle', 'probe'][i % 2 + 1], 'task-' || (i % 2000), 'world-1', 0, {tools}[i % 8 + 1],
                   '{{}}', i % 50 <> 0, CASE WHEN i % 50 = 0 THEN 'ModuleNotFoundError' END, false, false, 0.05
            FROM range(5000) r(i)"""
    )
    con.execute(
        """INSERT INTO train_steps (stage, run, step, wall_s, reward_mean, pass_rate, trajectories, trained,
                eval_reward, eval_pass_rate)
           SELECT s, s, i + 1, i * 2.0, 0.2 + i / 400, 0.1 + i / 400, 64, true,
                  CASE WHEN i % 20 = 0 THEN 0.2 + i / 450 END, CASE WHEN i % 20 = 0 THEN 0.1 + i / 450 END
           FROM range(200) r(i), (VALUES ('overfit'), ('hero')) v(s)"""
    )
    con.execute(
        """INSERT INTO evals (stage, suite, policy, task_id, pass_index, harness, domain, tier, reward, passed)
           SELECT 'hero', 'heldout', ['base', 'trained'][i % 2 + 1], 'task-' || (i // 8), i // 2 % 4, 'mcp',
                  'investment_banking', 'toy', (hash(i) % 101) / 100.0, hash(i) % 3 = 0
           FROM range(10000) r(i)"""
    )
    con.close()
    return store


FILTERS = {
    "stage=overfit": {"stage": "overfit"},
    "tool=pdf_read_pdf": {"tool": "pdf_read_pdf"},
    "tool + call_error": {"tool": "code_exec_run_python", "call_error": "ModuleNotFoundError"},
    "call=empty, sorted by reward": {"call": "empty", "sort": "reward", "order": "desc"},
    "reward 0.2–0.4 + domain + tier": {"reward_min": 0.2, "reward_max": 0.4, "domain": "corporate_law", "tier": "toy"},
    "task contains '17' + weights version 30": {"task": "17", "weight_version": 30},
    "five filters, offset 200": {"stage": "overfit", "tool": "sheets_read_cell", "call": "failed", "reward_min": 0.1,
                                 "stop_reason": "stop", "offset": 200},
}  # fmt: skip


def timed_get(client: httpx.Client, url: str, params: dict | None = None) -> float:
    started = time.perf_counter()
    response = client.get(url, params=params)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


def median_ms(client: httpx.Client, url: str, params: dict | None, repeats: int) -> float:
    return 1000 * statistics.median(timed_get(client, url, params) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trajectories", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="build the run under this folder and keep it (default: a temp dir)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="explorer-scale-"))
    started = time.perf_counter()
    store = build_run(root / "runs", args.trajectories)
    counts = Catalog(store.catalog_path).query(
        "SELECT (SELECT count(*) FROM trajectories) AS t, (SELECT count(*) FROM turns) AS turns, "
        "(SELECT count(*) FROM tool_calls) AS calls"
    )[0]
    size_mb = store.catalog_path.stat().st_size / 2**20
    print(f"built {counts['t']} trajectories, {counts['turns']} turns, {counts['calls']} tool calls "
          f"({size_mb:.0f} MiB catalog) in {time.perf_counter() - started:.1f} s")  # fmt: skip

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "cli", "view", "scale", "--runs-root", str(root / "runs")]
    launched = time.perf_counter()
    server = subprocess.Popen([*command, "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL)
    rows: list[tuple[str, float]] = []
    try:
        with httpx.Client(timeout=60) as client:
            while True:
                try:
                    client.get(f"{base}/static/app.css").raise_for_status()
                    break
                except httpx.HTTPError:
                    if server.poll() is not None or time.perf_counter() - launched > 60:
                        raise SystemExit("recipe view did not start") from None
                    time.sleep(0.05)
            rows.append(("server cold start (process → first answer)", 1000 * (time.perf_counter() - launched)))
            opens = []
            for _ in range(args.repeats):
                tick = time.perf_counter()
                for path in ("/", "/static/app.js", "/static/app.css", "/api/run"):
                    timed_get(client, base + path)
                timed_get(client, f"{base}/api/trajectories", {"limit": 50})
                opens.append(time.perf_counter() - tick)
            rows.append(("open: first (page + /api/run + first list page)", 1000 * opens[0]))
            rows.append((f"open: median of {args.repeats}", 1000 * statistics.median(opens)))

            def measure(name: str, path: str, params: dict | None = None) -> None:
                rows.append((name, median_ms(client, base + path, params, args.repeats)))

            n = counts["t"]
            for sort, order in (("id", "asc"), ("reward", "desc"), ("length", "desc")):
                for offset in (0, 1_000, n // 2, max(0, n - 50)):
                    params = {"sort": sort, "order": order, "limit": 50, "offset": offset}
                    measure(f"page sort={sort} {order} offset={offset}", "/api/trajectories", params)
            for name, params in FILTERS.items():
                measure(f"filter {name}", "/api/trajectories", params)
            for trajectory_id in (1, n // 2, n):
                measure(f"open trajectory {trajectory_id} (decoded)", f"/api/trajectories/{trajectory_id}")
            measure("compare one task (all its trajectories)", "/api/compare", {"task_id": "task-17"})
            measure("tool report, all stages", "/api/tools")
            measure("tool report, derisk", "/api/tools", {"stage": "derisk"})
            measure("curves and tables", "/api/curves")
    finally:
        server.terminate()
        server.wait(timeout=10)
    width = max(len(name) for name, _ in rows)
    print(f"\n{'request':<{width}}  {'ms':>8}")
    for name, ms in rows:
        print(f"{name:<{width}}  {ms:8.1f}")
    verdict = "under" if opens[0] < TARGET_OPEN_S else "OVER"
    print(f"\nfirst open {opens[0]:.2f} s: {verdict} the {TARGET_OPEN_S:g} s target ({opens[0] / TARGET_OPEN_S:.2f}×)")
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
