"""A team's own environment through the seven gates on the smoke profile: mcp-server-git (PyPI) on seeded
repositories, tasks without a single oracle; and a verifiers environment, graded by its own reward function. De-risk
lets the servers' start and the probes stand in and says so; every stage trains and evaluates on the team's tasks
through the real server; the explorer lists its tools. A server that is not installed fails de-risk with a finding
naming it, and nothing later runs.

The smoke base is taught the environment's probe calls on top of the generated worlds (~1 min on first use); the
verifiers chain takes ~10 min on 2 cores (each rollout starts its toolset, ~4 s of imports).
"""

from pathlib import Path

import pytest

from flows.pipeline import pipeline
from tasks.catalog import Catalog
from tasks.explorer.queries import Explorer
from tasks.run_store import RunStore, StageStatus
from tests.envs.byo.environments import EXAMPLES, environment, servers_installed  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def run(runs: Path, data: Path, file: Path):
    overrides = [f"environment.data={data}", f"environment.file={file}"]
    state = pipeline(profile="smoke", overrides=overrides, runs_root=str(runs), return_state=True)
    [folder] = [p for p in runs.iterdir() if (p / "run.json").exists()]
    return state, RunStore(folder)


@pytest.mark.timeout(900)  # the whole chain, its base taught first: 3-5 min on 2 cores
def test_the_git_environment_passes_the_seven_gates_without_an_oracle(prefect_harness, environment_data, tmp_path):
    state, store = run(tmp_path / "runs", environment_data, EXAMPLES / "git-history")
    assert state.is_completed(), state.message
    assert [m.status for m in store.manifests()] == [StageStatus.PASSED] * 7
    derisk = store.manifest("1-derisk")
    names = [c["name"] for c in derisk.gate["criteria"]]
    assert "oracle pass rate" not in names and "MCP servers that start and list their tools" in names
    assert "no task has an oracle" in derisk.gate["not_checked"][0]
    catalog = Catalog(store.catalog_path)
    assert catalog.count("oracle", "derisk") == 0
    task_ids = {row["task_id"] for row in catalog.query("SELECT DISTINCT task_id FROM trajectories")}
    assert task_ids and all(task_id.split("-")[0] in {"latest", "review", "current"} for task_id in task_ids)
    tito = store.manifest("2-tito").gate["criteria"]
    assert next(c["measured"] for c in tito if c["name"].startswith("rollouts with")) >= 1
    tools = {row["tool"] for row in Explorer(store).tools()["tools"]}
    assert {"git_git_log", "git_git_branch", "git_git_status"} <= tools


@pytest.mark.timeout(1800)  # ~10 min on 2 cores: every rollout outside the pool starts its toolset (~4 s of imports)
def test_a_verifiers_environment_passes_the_seven_gates_graded_by_its_own_reward(
    prefect_harness, environment_data, tmp_path
):
    state, store = run(tmp_path / "runs", environment_data, EXAMPLES / "verifiers-ledger")
    assert state.is_completed(), state.message
    assert [m.status for m in store.manifests()] == [StageStatus.PASSED] * 7
    catalog = Catalog(store.catalog_path)
    assert catalog.count("oracle", "derisk") == 0
    graded = catalog.query(
        "SELECT count(*) AS n, sum(reward) AS rewarded FROM trajectories WHERE stage = 'derisk' AND error_class IS NULL"
    )[0]
    assert graded["n"] > 0 and graded["rewarded"] > 0  # the ledger's @vf.reward passed some of the base's replies
    tools = {row["tool"] for row in Explorer(store).tools()["tools"]}
    assert {"vf_ledger_balance", "vf_ledger_list_accounts"} <= tools


def test_a_server_that_is_not_installed_fails_derisk_naming_it(prefect_harness, environment_data, tmp_path):
    spec = environment(tmp_path / "env", [{"name": "vcs", "command": ["mcp-server-gti"]}])
    state, store = run(tmp_path / "runs", environment_data, spec)
    assert state.is_failed() and state.name == "GateFailed"
    statuses = [m.status for m in store.manifests()]
    assert statuses == [StageStatus.GATE_FAILED] + [StageStatus.SKIPPED] * 6
    gate = store.manifest("1-derisk").gate
    assert any(f["subject"] == "server vcs" and "not found" in f["problem"] for f in gate["findings"])
