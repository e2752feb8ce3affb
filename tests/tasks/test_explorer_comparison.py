"""``recipe compare A B``: two hand-built runs side by side (stages, gates, metrics, stage tables, curves), written
whole into a folder inside neither run; an unknown run, one run twice, runs of different stages and a foreign folder
are one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from cli.main import USAGE_ERROR, main
from tasks.catalog import Catalog
from tasks.explorer import comparison
from tasks.explorer.comparison import MARKER, default_out, write_comparison
from tasks.explorer.queries import Explorer
from tasks.explorer.server import create_app
from tasks.run_store import RunStore, StageStatus
from tests.tasks.run_folders import add_stage, criterion, make_run, overfit


def _arms(baseline: float, dppo: float) -> list[dict[str, Any]]:
    return [
        {"arm": "baseline", "mean_reward": baseline, "verdict": "baseline", "landed": False},
        {"arm": "dppo", "mean_reward": dppo, "verdict": "gain", "landed": True},
    ]


def _run(runs_root: Path, run_id: str, n: int, passed: bool, dppo: float) -> RunStore:
    store = make_run(runs_root, run_id, created_at=f"2026-12-0{n}T02:00:00+00:00", commit=str(n) * 40)
    add_stage(store, "1-derisk", StageStatus.PASSED, criteria=[criterion("oracle pass rate", 1.0, ">=", 0.99, True)])
    overfit(store, passed, gain=0.3 if passed else 0.01, p_value=0.001 if passed else 0.3)
    if passed:
        add_stage(store, "5-ablations", StageStatus.PASSED, metrics={"landed": "dppo", "arms": _arms(0.4, dppo)})
    steps = [{"stage": "overfit", "run": "overfit", "step": s, "reward_mean": 0.1 * s * n} for s in (1, 2, 3)]
    Catalog(store.catalog_path).append("train_steps", steps)
    return store


@pytest.fixture
def runs(tmp_path: Path) -> tuple[RunStore, RunStore]:
    return _run(tmp_path / "runs", "local-1", 1, True, 0.5), _run(tmp_path / "runs", "local-2", 2, False, 0.0)


def test_two_runs_side_by_side(runs: tuple[RunStore, RunStore], monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = runs
    drawn: dict[str, dict] = {}
    real = comparison.curves

    def spy(path: Path, series: dict, ylabel: str, title: str) -> Path:
        drawn[path.name] = dict(series)
        return real(path, series, ylabel, title)

    monkeypatch.setattr(comparison, "curves", spy)
    out = default_out(a.root.parent, a, b)
    files = write_comparison(a, b, out)
    assert files.markdown == out / "compare.md" and out == a.root.parent / "compare" / "local-1-vs-local-2"
    md = files.markdown.read_text()
    assert "| 4-overfit | passed | 1 | gate_failed | 1 |" in md  # the stage table: status, seconds of each
    assert "| 4-overfit | subset reward gain | 0.3 | >= 0.05 | pass | 0.01 | >= 0.05 | FAIL |" in md
    assert "| 1-derisk | oracle pass rate | 1 | >= 0.99 | pass | 1 | >= 0.99 | pass |" in md
    assert "| p_value | 4-overfit | 0.001 | 0.3 | 0.299 |" in md  # metrics by stage, B − A
    # The ablation table: A's row of each arm above B's (B has no ablations: only A's rows).
    assert "## 5-ablations: arms" in md and "| dppo | A | 0.5 | gain | True |" in md
    assert drawn == {
        "curves-4-overfit.png": {
            "A · overfit": [(1, pytest.approx(0.1)), (2, pytest.approx(0.2)), (3, pytest.approx(0.3))],
            "B · overfit": [(1, pytest.approx(0.2)), (2, pytest.approx(0.4)), (3, pytest.approx(0.6))],
        }
    }
    assert "![4-overfit: training curves](curves-4-overfit.png)" in md and (out / "curves-4-overfit.png").is_file()
    html = files.html.read_text()
    assert "data:image/png;base64," in html and "local-1" in html and "<table>" in html
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MARKER, "compare.md", "compare.html", "curves-4-overfit.png"]
    )
    # Written again: replaced whole, no staging folder left beside it; neither run folder gained a file.
    write_comparison(a, b, out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["local-1-vs-local-2"]
    assert not (a.root / "compare.md").exists() and not (b.root / "compare.md").exists()


def test_recipe_compare_prints_the_path(runs: tuple[RunStore, RunStore], capsys: pytest.CaptureFixture) -> None:
    a, _ = runs
    assert main(["compare", "local-1", "local-2", "--runs-root", str(a.root.parent)]) == 0
    assert str(a.root.parent / "compare" / "local-1-vs-local-2" / "compare.html") in capsys.readouterr().out


def _refused(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    assert main(argv) == USAGE_ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("recipe: error: "), err
    return err


def test_pairs_that_cannot_be_compared_are_one_line(
    runs: tuple[RunStore, RunStore], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    root = ["--runs-root", str(tmp_path / "runs")]
    assert "no run 'nope'" in _refused(["compare", "local-1", "nope", *root], capsys)
    assert "same run" in _refused(["compare", "local-1", "local-1", *root], capsys)
    other = make_run(tmp_path / "runs", "other", created_at="2026-12-03T00:00:00+00:00")
    add_stage(other, "4-other", StageStatus.PASSED)
    assert "different stages" in _refused(["compare", "local-1", "other", *root], capsys)
    empty = make_run(tmp_path / "runs", "empty", created_at="2026-12-03T00:00:00+00:00")
    assert empty.manifests() == []
    assert "share no stage" in _refused(["compare", "local-1", "empty", *root], capsys)
    assert not (tmp_path / "runs" / "compare").exists()


def test_the_folder_is_inside_neither_run_and_never_someone_else_s(
    runs: tuple[RunStore, RunStore], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    a, _ = runs
    root = ["--runs-root", str(tmp_path / "runs")]
    inside = _refused(["compare", "local-1", "local-2", *root, "--out", str(a.root / "cmp")], capsys)
    assert "inside run local-1" in inside and not (a.root / "cmp").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert "no .rl-recipe-compare" in _refused(["compare", "local-1", "local-2", *root, "--out", str(mine)], capsys)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_the_explorer_compares_its_run_with_another_beside_it(runs: tuple[RunStore, RunStore]) -> None:
    client = TestClient(create_app(Explorer(runs[0])))
    assert [r["run_id"] for r in client.get("/api/runs").json()] == ["local-2"]  # the others, never itself
    data = client.get("/api/compare-runs", params={"with": "local-2"}).json()
    assert data["runs"] == {"A": "local-1", "B": "local-2"} and data["provenance"][0].startswith("A: local-1")
    tables = {t["heading"]: t for t in data["tables"]}
    gain = ["4-overfit", "subset reward gain", "0.3", ">= 0.05", "pass", "0.01", ">= 0.05", "FAIL"]
    assert gain in tables["Gates"]["rows"]
    assert list(tables) == [t for t, _ in comparison._sections(*(comparison._manifests(s) for s in runs))]
    [curves] = data["curves"]
    assert curves["stage"] == "4-overfit" and set(curves["series"]) == {"A · overfit", "B · overfit"}
    # only a run listed beside it, by id: never a path, never itself
    for bad in ("../local-2", "/etc", "local-1", "nope", ""):
        response = client.get("/api/compare-runs", params={"with": bad})
        assert response.status_code == 400 and "to compare with" in response.json()["error"], bad
