"""The trace explorer's HTTP API (Starlette's test client), its static export and ``recipe view``'s errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from flows.cli import main
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
    code = "import sys, tasks.explorer.server, tasks.explorer.static_export; print('prefect' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"


def _script_data(path: Path, prefix: str) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith(prefix)
    return json.loads(text.removeprefix(prefix).rstrip().removesuffix(";"))


def test_static_export_holds_the_page_and_its_data(run, tmp_path) -> None:
    index = write_static(Explorer(run, load_decoder(find_tokenizer(run))), tmp_path / "out", limit=5)
    html = index.read_text()
    assert '<script src="data/run.js"></script>' in html and 'src="static/app.js"' in html
    data = _script_data(tmp_path / "out" / "data" / "run.js", "window.EXPLORER_STATIC = ")
    assert data["total"] == 36 and [r["id"] for r in data["rows"]] == [1, 2, 3, 4, 5]
    assert all(isinstance(r["calls"], list) for r in data["rows"]) and "derisk" in data["tools"]
    assert sorted(p.name for p in (tmp_path / "out" / "data" / "t").iterdir()) == [f"{i}.js" for i in range(1, 6)]
    detail = (tmp_path / "out" / "data" / "t" / "1.js").read_text()
    assert detail.startswith("window.explorerDetail(1, {")
    assert (tmp_path / "out" / "static" / "app.js").is_file()


def test_recipe_view_names_a_missing_run(tmp_path, capsys) -> None:
    assert main(["view", "nope", "--runs-root", str(tmp_path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_recipe_view_static(run, tmp_path, capsys) -> None:
    out = tmp_path / "site"
    assert main(["view", str(run.root), "--static", str(out), "--limit", "2"]) == 0
    assert (out / "index.html").is_file() and len(list((out / "data" / "t").iterdir())) == 2
    assert main(["view", str(run.root), "--static", str(out), "--tokenizer", str(tmp_path / "none")]) == 2
    assert "cannot read the tokenizer" in capsys.readouterr().err
