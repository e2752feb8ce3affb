"""The dry-run entry point: checks the overrides, prints the config and metric blocks our parser reads."""

import subprocess
import sys
from pathlib import Path

from cli.commands.cluster import skyrl_run
from flows.config import load_profile
from trainer.skyrl import dryrun
from trainer.skyrl.metrics import metric_blocks, train_step_rows
from trainer.skyrl.render import render

REPO = Path(__file__).resolve().parents[3]


def _lines() -> list[str]:
    return render(skyrl_run(load_profile("qwen36-35b"))).lines()


def test_a_valid_set_prints_the_config_and_dry_run_blocks(capsys) -> None:
    assert dryrun.run(["--steps", "3", *_lines()]) == 0
    out = capsys.readouterr().out
    assert "[dry run] overrides valid: 103 keys (85 SkyRL, 18 rl_recipe)" in out
    assert "policy_loss_type: dppo" in out and "max_staleness_steps: 3" in out
    rows = train_step_rows(metric_blocks(out.splitlines()), stage="hero", run="dry")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["trajectories"] == 256 and r["trained"] is False and "loss" not in r for r in rows)
    assert rows[-1]["wall_s"] >= rows[0]["wall_s"] >= 0


def test_a_broken_set_is_one_line_and_exit_2(capsys) -> None:
    lines = [line for line in _lines() if not line.startswith("trainer.strategy=")]
    lines = [line.replace("train_batch_size=16", "train_batch_size=32") for line in lines]
    assert dryrun.run(lines) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("[dry run] invalid:") and "\n" not in out
    assert "trainer.strategy is missing" in out and "train_batch_size must equal" in out
    assert dryrun.run(["not-an-override"]) == 2


def test_it_runs_as_a_module_without_skyrl_or_vllm() -> None:
    code = (
        "import runpy, sys; sys.argv = ['dryrun', '--steps', '1', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('trainer.skyrl.dryrun', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert not {'skyrl', 'vllm', 'torch', 'ray'} & set(sys.modules), sorted(sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *_lines()], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "[dry run] Step 1:" in done.stdout
