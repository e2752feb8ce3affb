"""The trace explorer's HTTP API (Starlette's test client), its static export and ``recipe view``'s errors."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from cli.main import main
from tasks.explorer import static_export
from tasks.explorer.queries import Explorer
from tasks.explorer.sample import build_sample_run
from tasks.explorer.server import DATA_MARKER, create_app
from tasks.explorer.static_export import write_static
from tasks.explorer.tokens import find_tokenizer, load_decoder
from tasks.run_store import RunStore


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> RunStore:
    return build_sample_run(tmp_path_factory.mktemp("explorer") / "runs")


@pytest.fixture(scope="module")
def client(run) -> TestClient:
    return TestClient(create_app(Explorer(run, load_decoder(find_tokenizer(run)))))


def test_the_page_and_its_assets(client) -> None:
    page = client.get("/")
    assert page.status_code == 200 and 'src="static/app.js"' in page.text and DATA_MARKER not in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "http" not in page.text.replace("http-equiv", "")  # nothing loaded from outside
    assert client.get("/static/app.js").status_code == 200 and client.get("/static/app.css").status_code == 200


def test_the_list_filters_sorts_and_pages(client) -> None:
    every = client.get("/api/trajectories").json()
    assert every["total"] == 36 and len(every["rows"]) == 36
    page = client.get("/api/trajectories", params={"tool": "pdf_read_pdf", "sort": "reward", "order": "desc",
                                                   "limit": 3, "offset": 1}).json()  # fmt: skip
    assert page["total"] < 36 and len(page["rows"]) == 3 and page["offset"] == 1
    assert [r["reward"] for r in page["rows"]] == sorted((r["reward"] for r in page["rows"]), reverse=True)


def test_hostile_and_bad_parameters(client) -> None:
    hostile = client.get("/api/trajectories", params={"task": "x' OR '1'='1", "stage": "'; DROP TABLE trajectories;"})
    assert hostile.status_code == 200 and hostile.json()["total"] == 0
    bad = client.get("/api/trajectories", params={"sort": "reward; DROP TABLE trajectories"})
    assert bad.status_code == 400 and "sort must be one of" in bad.json()["error"]
    assert client.get("/api/trajectories", params={"reward_min": "x"}).status_code == 400
    assert client.get("/api/compare").status_code == 400
    assert client.get("/api/trajectories").json()["total"] == 36


def test_one_trajectory_compare_tools_curves(client) -> None:
    one = client.get("/api/trajectories/1").json()
    assert one["id"] == 1 and one["turns"] and one["criteria"]
    missing = client.get("/api/trajectories/9999")
    assert missing.status_code == 404 and missing.json() == {"error": "no trajectory 9999"}
    assert client.get("/api/trajectories/abc").status_code == 404
    assert {r["policy"] for r in client.get("/api/compare", params={"task_id": "ib-3-ebitda"}).json()["rows"]} == {
        "base",
        "trained",
    }
    tools = client.get("/api/tools", params={"stage": "derisk"}).json()
    assert {t["tool"] for t in tools["tools"]} >= {"slides_add_slide", "code_exec_run_python"}
    assert client.get("/api/curves").json()["steps"]
    assert client.get("/api/run").json()["run"]["run_id"] == "sample"


def test_the_server_imports_no_prefect() -> None:
    code = (
        "import sys, tasks.explorer.server, tasks.explorer.static_export, tasks.explorer.queries as q; "
        "q.registry_tools(); print('prefect' in sys.modules)"  # the tool report's lazy import of the apps too
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def _script_data(path: Path, prefix: str) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith(prefix)
    return json.loads(text.removeprefix(prefix).rstrip().removesuffix(";"))


def test_static_export_holds_the_page_and_its_data(run, tmp_path) -> None:
    done = write_static(Explorer(run, load_decoder(find_tokenizer(run))), tmp_path / "out", limit=5)
    html = done.index.read_text()
    assert '<script src="data/run.js"></script>' in html and 'src="static/app.js"' in html
    data = _script_data(tmp_path / "out" / "data" / "run.js", "window.EXPLORER_STATIC = ")
    assert (done.written, done.total, data["total"], len(data["rows"])) == (5, 36, 36, 5)
    assert {r["stage"] for r in data["rows"]} == {"derisk", "overfit", "hero"}  # not the first five ids: every stage
    assert all(isinstance(r["calls"], list) for r in data["rows"]) and "derisk" in data["tools"]
    ids = sorted(r["id"] for r in data["rows"])
    assert sorted(p.name for p in (tmp_path / "out" / "data" / "t").iterdir()) == sorted(f"{i}.js" for i in ids)
    detail = (tmp_path / "out" / "data" / "t" / f"{ids[0]}.js").read_text()
    assert detail.startswith(f"window.explorerDetail({ids[0]}, {{")
    assert (tmp_path / "out" / "static" / "app.js").is_file()


def test_static_filters_count_what_the_folder_holds(run, tmp_path) -> None:
    write_static(Explorer(run), tmp_path / "out", limit=5)
    data = _script_data(tmp_path / "out" / "data" / "run.js", "window.EXPLORER_STATIC = ")
    facets, rows = data["overview"]["facets"], data["rows"]
    for name in ("stage", "source", "policy", "domain", "stop_reason"):
        held = {v["value"]: v["n"] for v in facets[name] if v["n"]}
        assert held == dict(Counter(r[name] for r in rows if r[name] is not None)), name
        assert all(v["n"] <= v["of"] for v in facets[name])
    tools = {v["value"]: v["n"] for v in facets["tool"] if v["n"]}
    calls = Counter(c[0] for r in rows for c in r["calls"])  # distinct per trajectory: at most the calls held
    assert set(tools) == set(calls) and all(calls[t] <= n for t, n in tools.items())
    stages = {s["stage"]: (s["trajectories"], s["trajectories_of"]) for s in data["overview"]["stages"]}
    assert stages["derisk"] == (Counter(r["stage"] for r in rows)["derisk"], 16) and stages["tito"] == (0, 0)


def test_a_large_run_exports_every_stage_with_progress(tmp_path, monkeypatch) -> None:
    from benchmarks.explorer_scale import build_run

    store = build_run(tmp_path / "runs", 3_000)
    monkeypatch.setattr(static_export, "PROGRESS_EVERY", 100)
    lines: list[str] = []
    done = write_static(Explorer(store), tmp_path / "out", limit=500, progress=lines.append)
    data = _script_data(tmp_path / "out" / "data" / "run.js", "window.EXPLORER_STATIC = ")
    rows = data["rows"]
    strata = Counter((r["stage"], r["source"]) for r in rows)
    assert (done.written, done.total, len(rows)) == (500, 3_000, 500)
    assert set(strata) == {("derisk", "base-rollouts"), ("overfit", "train/overfit"), ("hero", "eval/heldout")}
    assert min(strata.values()) >= 500 // 3  # each its share: the first 500 ids would hold no hero stage
    steps = sorted(r["step"] for r in rows if r["stage"] == "overfit")
    assert steps[0] <= 1 and steps[-1] >= 5  # spread over the loop: early and late steps
    assert lines[0].startswith("exporting 500 of 3000 trajectories")
    assert lines[1].startswith("  overview, tool reports, curves and list ready")
    assert [line.split()[0] for line in lines[2:]] == ["200", "400"]  # after each batch of 200, once 100 more are out
    assert done.seconds < 60 and done.size > 0


def test_recipe_view_names_a_missing_run(tmp_path, capsys) -> None:
    assert main(["view", "nope", "--runs-root", str(tmp_path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_recipe_view_static(run, tmp_path, capsys) -> None:
    out = tmp_path / "site"
    assert main(["view", str(run.root), "--static", str(out), "--limit", "2"]) == 0
    assert (out / "index.html").is_file() and len(list((out / "data" / "t").iterdir())) == 2
    said = capsys.readouterr().out.strip().splitlines()
    assert said[0].startswith("exporting 2 of 36 trajectories")
    assert said[-1].startswith(f"wrote {out / 'index.html'}: 2 of 36 trajectories") and " s " in said[-1]
    assert main(["view", str(run.root), "--static", str(out), "--tokenizer", str(tmp_path / "none")]) == 2
    assert "cannot read the tokenizer" in capsys.readouterr().err
