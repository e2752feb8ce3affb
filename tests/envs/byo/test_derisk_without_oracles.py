"""De-risk of a team's environment without oracles: the servers' start and the probes stand in, and each broken
server — a wrong command, a tool that always errors, one that hangs — fails the gate with a finding naming it.

The sound case is the shipped git example over the real mcp-server-git; the broken tool is that same real server on a
world where the author's setup made no repository, and the hanging one the fixture server.
"""

from pathlib import Path

from envs.build import load_tasks
from envs.byo.build import byo_environment_build
from envs.check import OracleTransport
from flows.config import DeriskThresholds
from flows.stage_gates import DeriskMeasured, derisk_gate
from tasks.catalog import Catalog
from tasks.context import StageScope
from tasks.derisk import check_environment_task, tool_stats, unusable_own_environment
from tests.envs.byo.environments import FIXTURE_SERVER, environment, example, servers_installed  # noqa: F401


def derisk(build: Path, tmp_path: Path):
    """The de-risk stage's checks and gate on ``build``, the base's rollouts stood in by a varied, clean sample."""
    catalog = Catalog(tmp_path / "c.duckdb")
    scope = StageScope(catalog, "derisk", "1-derisk", build / "worlds")
    checked = check_environment_task.fn(scope, load_tasks(build), OracleTransport.STDIO, [])
    measured = DeriskMeasured(
        checked["solved"], checked["tasks"], rollouts=10, infra_rate=0.0, tool_stats=tool_stats(catalog, "derisk"),
        tasks_with_variance=4, servers=checked["servers"], known_good_probes=checked["known_good_probes"],
    )  # fmt: skip
    return checked, derisk_gate(measured, DeriskThresholds(), subset_size=2)


def test_the_git_example_passes_with_probes_standing_in_for_oracles(tmp_path: Path) -> None:
    checked, report = derisk(example("git-history", tmp_path / "data"), tmp_path)
    assert report.passed, report.markdown()
    assert checked["tasks"] == 0 and len(checked["servers"]) == 3 and unusable_own_environment(checked) is None
    # 3 worlds × (3 user probes + 4 schema probes, every required argument known from probes.arguments)
    assert checked["probes"] == 21 and checked["known_good_probes"] == 21
    names = [c.name for c in report.criteria]
    assert "oracle pass rate" not in names and "MCP servers that start and list their tools" in names
    assert report.not_checked == [report.not_checked[0]] and "no task has an oracle" in report.not_checked[0]
    assert "## Not checked" in report.markdown()


def test_a_server_that_is_not_installed_fails_the_gate_naming_it(tmp_path: Path) -> None:
    spec = environment(tmp_path / "env", [{"name": "vcs", "command": ["mcp-server-gti"]}])
    checked, report = derisk(byo_environment_build(spec, tmp_path / "data"), tmp_path)
    assert not report.passed and "vcs" in unusable_own_environment(checked)
    [criterion] = [c for c in report.criteria if c.name == "MCP servers that start and list their tools"]
    assert criterion.measured == 0 and not criterion.passed
    [finding, *_] = [f for f in report.findings if f.subject == "server vcs"]
    assert "command 'mcp-server-gti' not found" in finding.problem and "install" in finding.advice


def test_a_tool_that_always_errors_fails_the_gate_naming_server_and_tool(tmp_path: Path) -> None:
    # mcp-server-git itself, on worlds without a repository: every known-good call errors
    server = {"name": "git", "command": ["mcp-server-git"], "tools": ["git_status", "git_log"]}
    probes = {"arguments": {"repo_path": "."}, "calls": [{"tool": "git_log", "args": {"repo_path": "."}}]}
    checked, report = derisk(
        byo_environment_build(environment(tmp_path / "env", [server], probes), tmp_path / "data"), tmp_path
    )
    assert not report.passed and "git_git_log" in unusable_own_environment(checked)
    failing = {f.subject: f for f in report.findings}
    assert {"git_git_log", "git_git_status"} <= set(failing)
    assert failing["git_git_log"].rate == 1.0


def test_a_tool_that_hangs_fails_the_gate_on_its_timeout_rate(tmp_path: Path) -> None:
    server = {"name": "slow", "command": FIXTURE_SERVER, "tools": ["echo", "hang"], "timeout_s": 1}
    probes = {"calls": [{"tool": "echo", "args": {"text": "hi"}, "expect": "hi"}]}
    checked, report = derisk(
        byo_environment_build(environment(tmp_path / "env", [server], probes), tmp_path / "data"), tmp_path
    )
    assert not report.passed and "slow_hang" in unusable_own_environment(checked)
    [timeout] = [c for c in report.criteria if c.name == "worst tool timeout rate"]
    assert not timeout.passed and timeout.detail == "slow_hang"
    assert "slow_hang" in {f.subject for f in report.findings} and "slow_echo" not in {
        f.subject for f in report.findings
    }
