"""``recipe view RUN --static OUT``: nothing lost, nothing outside (red-team finding "nothing lost, nothing outside").

The export writes only into a folder it made (its marker file ``.rl-recipe-explorer`` inside) or an empty one: a
folder holding anything else, OUT being a file or a symbolic link, a symbolic link inside OUT, a file in OUT the
export never writes, a trajectory id that is not an integer — each ends in one line ``recipe: error: ...`` and exit 2,
with every file where it was and nothing written beside OUT. A re-export swaps the whole folder in at once: a failure
half-way leaves the previous export as it was.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from cli.main import USAGE_ERROR, main
from tasks.explorer.queries import Explorer
from tasks.explorer.sample import build_sample_run
from tasks.explorer.static_export import MARKER, write_static
from tasks.run_store import RunStore

TEXT_ID = "../../../pwned-by-id"
"""From ``OUT/data/t/``, three folders up is OUT's parent."""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The sample run, built once; each test works on its own copy (some damage the catalog)."""
    root = tmp_path_factory.mktemp("static-export") / "runs"
    build_sample_run(root)
    return root


@pytest.fixture
def runs_root(built: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(built, tmp_path / "runs"))


def _export(runs_root: Path, out: Path) -> list[str]:
    return ["view", "sample", "--runs-root", str(runs_root), "--static", str(out), "--limit", "6"]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command printed (asserting exit 2, one line, no traceback)."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert (code, len(lines)) == (USAGE_ERROR, 1), err[-2000:]
    assert lines[0].startswith("recipe: error: "), lines[0]
    return lines[0]


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: a file's bytes, a link's target (never followed)."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "/"
    return found


def test_a_folder_the_export_did_not_make_is_refused_and_kept(runs_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "site"
    (out / "data" / "t").mkdir(parents=True)
    (out / "data" / "t" / "important.txt").write_text("keep me")
    (out / "index.html").write_text("<p>my own page</p>")
    before = _tree(tmp_path)
    line = _refused(_export(runs_root, out), capsys)
    assert str(out) in line and MARKER in line
    assert _tree(tmp_path) == before


def test_out_being_a_file_or_a_link_is_one_line(runs_root: Path, tmp_path: Path, capsys) -> None:
    file = tmp_path / "site.html"
    file.write_text("mine")
    assert "is a file" in _refused(_export(runs_root, file), capsys)
    assert file.read_text() == "mine"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    assert "symbolic link" in _refused(_export(runs_root, link), capsys)
    assert link.is_symlink() and not any(elsewhere.iterdir())


def test_a_symbolic_link_inside_an_earlier_export_is_refused(runs_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "site"
    assert main(_export(runs_root, out)) == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "important.txt").write_text("keep me")
    details = out / "data" / "t"
    for path in details.iterdir():
        path.unlink()
    details.rmdir()
    details.symlink_to(outside)
    before = _tree(tmp_path)
    assert "symbolic link" in _refused(_export(runs_root, out), capsys)
    assert _tree(tmp_path) == before


def test_a_file_the_export_never_writes_is_not_replaced(runs_root: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "site"
    assert main(_export(runs_root, out)) == 0
    (out / "data" / "t" / "important.txt").write_text("keep me")
    line = _refused(_export(runs_root, out), capsys)
    assert "important.txt" in line
    assert (out / "data" / "t" / "important.txt").read_text() == "keep me"


def test_a_text_trajectory_id_never_writes_outside_out(runs_root: Path, tmp_path: Path, capsys) -> None:
    catalog = RunStore.open(runs_root, "sample").catalog_path
    con = duckdb.connect(str(catalog))
    for table, column in (("trajectories", "id"), ("turns", "trajectory_id"), ("tool_calls", "trajectory_id")):
        con.execute(f"ALTER TABLE {table} ALTER {column} TYPE VARCHAR")
        con.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = '1'", [TEXT_ID])
    con.close()
    work = tmp_path / "work"
    work.mkdir()
    out = work / "a" / "b" / "site"
    line = _refused(_export(runs_root, out), capsys)
    assert "not an integer" in line
    assert not list(tmp_path.rglob("pwned-by-id*")) and not (work / "a" / "b").exists()


def test_an_empty_folder_is_used_and_a_re_export_replaces_the_folder_whole(runs_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    out.mkdir()
    assert main(_export(runs_root, out)) == 0
    assert (out / MARKER).is_file() and (out / "index.html").is_file()
    first = len(list((out / "data" / "t").iterdir()))
    assert main([*_export(runs_root, out)[:-1], "2"]) == 0  # --limit 2: the earlier export's details are gone
    assert 0 < len(list((out / "data" / "t").iterdir())) < first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site"]  # no staging folder left beside it


class _Failing:
    """A decoder that breaks on its ``n``-th call: the export stops half-way."""

    def __init__(self, n: int) -> None:
        self.left = n

    def decode(self, ids: list[int]) -> str:
        self.left -= 1
        if self.left < 0:
            raise RuntimeError("the decoder broke half-way")
        return " ".join(map(str, ids))


def test_an_export_that_fails_half_way_leaves_the_earlier_one_whole(runs_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "site"
    assert main(_export(runs_root, out)) == 0
    before = _tree(out)
    with pytest.raises(RuntimeError, match="half-way"):
        write_static(Explorer(RunStore.open(runs_root, "sample"), _Failing(20)), out, limit=10)
    assert _tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs", "site"]
