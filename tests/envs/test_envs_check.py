"""End to end over the whole environment: build every world and task, run every oracle, grade it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.build import build_environment, ensure_environment, load_tasks
from envs.types import Split


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("env") / "data"
    build_environment(out, seed=0)
    return out


def test_build_writes_worlds_tasks_and_manifest(data_dir):
    manifest = json.loads((data_dir / "manifest.json").read_text())
    tasks = load_tasks(data_dir)
    assert sum(manifest["task_counts"].values()) == len(tasks) >= 200
    assert {task.split for task in tasks} == set(Split)
    assert sorted(p.name for p in (data_dir / "worlds").iterdir()) == manifest["world_ids"]
    assert not data_dir.with_name("data.building").exists()
    # A second call with the same seed reuses the folder instead of rebuilding it.
    stamp = (data_dir / "manifest.json").stat().st_mtime_ns
    ensure_environment(data_dir, seed=0)
    assert (data_dir / "manifest.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize(
    "transport",
    [pytest.param("python", marks=pytest.mark.slow), pytest.param("inmemory", marks=pytest.mark.slow), "stdio"],
)
def test_every_oracle_solves_its_task(data_dir, transport):
    """All of them through the real MCP gateway (stdio: pooled sandboxes); straight through the apps and through the
    in-memory transport in the slow run (the same oracles, ~50 s more).

    Runs the CLI as a process, as a user does (the stdio transport hands its stderr to the gateway processes).
    """
    command = [sys.executable, "-m", "cli", "envs", "check", "--data", str(data_dir), "--transport", transport]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, cwd=Path(__file__).parents[2])
    n_tasks = len(load_tasks(data_dir))
    assert f"oracle solved {n_tasks}/{n_tasks}" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.returncode == 0


def test_check_reports_a_broken_task_and_fails(data_dir, tmp_path, capsys):
    from envs.check import check_task

    task = next(t for t in load_tasks(data_dir) if t.tier == "toy")
    broken = task.model_copy(update={"world_id": "no-such-world"})
    result = check_task(broken, data_dir / "worlds")
    assert not result.passed and "no-such-world" in (result.error or "")


def test_the_stdio_check_runs_worlds_at_once_and_reports_in_task_order(data_dir):
    """Worlds finish in any order; the results come back in the tasks' order, the probes world by world."""
    from envs.check import check_environment
    from envs.options import OracleTransport

    by_world: dict[str, list] = {}
    for task in load_tasks(data_dir):
        if task.tier == "toy" and len(by_world.setdefault(task.world_id, [])) < 2:
            by_world[task.world_id].append(task)
    worlds = sorted(by_world)[:3]
    # interleaved across worlds, the last world first: neither sorted by world nor by id
    tasks = [by_world[world][i] for i in range(2) for world in reversed(worlds)]
    seen: list[str] = []
    checked = check_environment(
        tasks, data_dir / "worlds", on_result=lambda r: seen.append(r.task_id), transport=OracleTransport.STDIO
    )
    assert [r.task_id for r in checked.oracles] == [t.task_id for t in tasks]
    assert sorted(seen) == sorted(t.task_id for t in tasks)
    assert all(r.passed for r in checked.oracles), [r.error for r in checked.oracles if not r.passed]
    probed = [p.world_id for p in checked.probes]
    assert sorted(set(probed)) == worlds and probed == sorted(probed)
