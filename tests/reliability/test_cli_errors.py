"""A user's mistake on the command line ends in one line ``recipe: error: ...`` (or argparse's own line) and exit
code 2 — no traceback, and before any set-up: these run in-process in well under a second each."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.main import USAGE_ERROR, main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse refuses a bad flag value itself
        code = exit_.code
    err = capsys.readouterr().err
    return code, err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["model", "bootstrap", "--steps", "-2"], "argument --steps: -2 is not a whole number ≥ 1"),
        (["eval", "run", "--tasks", "data", "--engine-url", "u", "--model", "m", "--passes", "0"], "--passes: 0"),
        (["eval", "run", "--tasks", "d", "--engine-url", "u", "--model", "m", "--temperature", "nan"], "nan"),
        (["engine", "serve", "--model", "m", "--port", "70000"], "a port"),
        (["view", "r", "--limit", "x"], "'x' is not a whole number"),
    ],
)
def test_a_number_out_of_range_is_refused_by_argparse(argv: list[str], says: str, capsys) -> None:
    code, err = run(argv, capsys)
    assert code == USAGE_ERROR and says in err and "Traceback" not in err


def test_errors_a_user_fixes_are_one_line_and_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.yaml").write_bytes(b"stages: [\n")
    (tmp_path / "tasks.jsonl").write_text('{"task_id": "t"}\n')
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    (tmp_path / "runs" / "r1" / "run.json").write_text("{}")
    engine = ("--engine-url", "u", "--model", "m")
    cases = {
        ("run", "--profile", "nope"): "no profile named 'nope'",
        ("run", "--profile", str(tmp_path / "broken.yaml")): "is not valid YAML",
        ("run", "--profile", "smoke", "--set", "stages.overfit.steps=-3"): "is not a valid profile",
        ("stage", "overfit", "--run", "nope"): "no run 'nope'",
        ("audit", "nope"): "no run 'nope'",
        ("eval", "run", "--tasks", str(tmp_path / "missing"), "--engine-url", "u", "--model", "m"): "cannot read",
        ("eval", "run", "--tasks", str(tmp_path / "tasks.jsonl"), "--engine-url", "u", "--model", "m"): "line 1",
        ("eval", "report", str(tmp_path)): "holds no eval.json",
        (
            "eval",
            "export-atif",
            str(tmp_path / "runs" / "r1"),
        ): "is a pipeline run folder: pass one of its stages' eval",
        ("eval", "run", "--run", "nope", "--stage", "hero", *engine): "no run 'nope'",
        ("eval", "run", "--run", "r1", *engine): "--run needs --stage",
        ("eval", "run", "--run", "r1", "--stage", "hero", *engine): "stage hero of run r1 ran no eval",
        ("eval", "run", "--run", "r1", "--stage", "hero", "--tier", "toy", *engine): "so --run refuses: --tier",
        ("eval", "run", "--tasks", "data", "--label", "base", *engine): "go only with --run RUN, not --tasks: --label",
        ("engine", "serve", "--model", str(tmp_path)): "is not a checkpoint folder",
        ("eval", "mcq", "--engine-url", "http://127.0.0.1:9", "--model", "m"): "cannot reach the engine",
    }
    for argv, says in cases.items():
        code, err = run(list(argv), capsys)
        lines = err.strip().splitlines()
        assert (code, len(lines)) == (USAGE_ERROR, 1), (argv, err)
        assert lines[0].startswith("recipe: error: ") and says in lines[0], (argv, err)
