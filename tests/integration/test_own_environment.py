"""A team's own environment through the seven gates on the smoke profile: mcp-server-git (PyPI) on seeded
repositories, tasks without a single oracle; and a verifiers environment, graded by its own reward function. De-risk
lets the servers' start and the probes stand in and says so; every stage trains and evaluates on the team's tasks
through the real server; the explorer lists its tools. A server that is not installed fails de-risk with a finding
naming it, and nothing later runs. With judged held-out tasks and a judge in the profile, de-risk audits the judge on
the base's graded answers (a real judge server on loopback, its verdicts by rule) and stops on one that passes empty
answers.

The smoke base is taught the environment's probe calls on top of the generated worlds (~1 min on first use); the
verifiers chain takes ~10 min on 2 cores (each rollout starts its toolset, ~4 s of imports).
"""

import json
import shutil
from pathlib import Path

import pytest

from flows.pipeline import pipeline
from tasks.catalog import Catalog
from tasks.explorer.queries import Explorer
from tasks.run_store import RunStore, StageStatus
from tests.envs.byo.environments import EXAMPLES, environment, servers_installed  # noqa: F401
from tests.judge_server import JudgeMode, RuleJudge, judge_server

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


def judged_environment(folder: Path) -> Path:
    """The git example with two judged held-out tasks (a number in each criterion, none in an empty answer)."""
    shutil.copytree(EXAMPLES / "git-history", folder)
    rows = [
        {"id": f"judged-latest-{world}", "world": f"repo-{world}", "split": "heldout",
         "prompt": "Who wrote the latest commit of the repository in the current folder (repo_path '.')?",
         "rubric": [{"kind": "llm_judge", "criteria": f"Names the author of commit 1 of the log of repo-{world}"}]}
        for world in (2, 3)
    ]  # fmt: skip
    with (folder / "tasks.jsonl").open("a", encoding="utf-8") as tasks:
        tasks.writelines(json.dumps(row) + "\n" for row in rows)
    return folder


@pytest.mark.parametrize("mode", [JudgeMode.RULE, JudgeMode.YES])
@pytest.mark.timeout(600)
def test_derisk_audits_the_judge_on_the_bases_graded_answers(prefect_harness, environment_data, tmp_path, mode):
    judge = RuleJudge(mode)
    with judge_server(judge) as url:
        overrides = [f"environment.data={environment_data}", f"environment.file={judged_environment(tmp_path / 'env')}"]
        overrides += [f"judge.url={url}", "judge.model=judge", "judge.api_key_env=null"]
        runs = tmp_path / "runs"
        state = pipeline(
            profile="smoke", overrides=overrides, stop_after="derisk", runs_root=str(runs), return_state=True
        )
    [folder] = [p for p in runs.iterdir() if (p / "run.json").exists()]
    gate = RunStore(folder).manifest("1-derisk").gate
    criteria = {c["name"]: c for c in gate["criteria"]}
    # 2 judged held-out tasks answered once: each judgement re-judged twice and set against an empty answer
    assert criteria["judge agrees with itself on re-judged samples"]["measured"] == 1.0
    assert len(judge.judged) == 2 * 4 and not any(line.startswith("judge sanity") for line in gate["not_checked"])
    if mode is JudgeMode.RULE:
        assert state.is_completed(), state.message
        assert criteria["empty answers the judge passes"]["measured"] == 0
    else:  # a judge that passes everything would reward any answer: de-risk stops the run on it
        assert state.is_failed() and criteria["empty answers the judge passes"]["measured"] == 2
        assert any(f["subject"] == "judge judge" and "empty answer" in f["problem"] for f in gate["findings"])
