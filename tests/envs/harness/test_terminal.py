"""The terminal harness: every bundled Harbor task (solve.sh → reward 1, nothing done → reward 0), the sandbox and
verifier contract, and one rollout through the agent loop against the scripted engine."""

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from envs.harness.agent import AgentSetup, HarnessConfig, run_group
from envs.harness.engine_client import CompletionsClient
from envs.harness.harbor import create_sandbox
from envs.harness.terminal import (
    ReferenceAgent,
    TerminalToolSession,
    bundled_terminal_tasks,
    grade_terminal,
    run_reference_agent,
    run_terminal_oracle,
    terminal_envs,
)
from envs.loaders import load_harbor
from envs.sandbox.limits import usable_bwrap
from envs.types import Domain, TaskSpec, VerifierReward

from .conftest import Reply

BUNDLED = bundled_terminal_tasks()
needs_bwrap = pytest.mark.skipif(
    usable_bwrap() is None, reason="bubblewrap cannot create a sandbox here: Harbor's /app, /tests need its mounts"
)


def harbor_task(root: Path, test_sh: str, toml: str = "", environment: dict[str, str] | None = None) -> TaskSpec:
    (root / "tests").mkdir(parents=True)
    (root / "instruction.md").write_text("Do the thing.\n")
    (root / "task.toml").write_text(toml)
    (root / "tests" / "test.sh").write_text(test_sh)
    for rel, content in (environment or {}).items():
        (root / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "environment" / rel).write_text(content)
    return load_harbor(root)


def test_at_least_ten_varied_bundled_tasks():
    assert len(BUNDLED) >= 10
    assert all(task.domain is Domain.TERMINAL and task.rubric == [VerifierReward()] for task in BUNDLED)
    assert len({task.metadata["category"] for task in BUNDLED}) >= 4
    for task in BUNDLED:
        folder = Path(task.metadata["task_dir"])
        assert (folder / "environment" / "Dockerfile").is_file(), task.task_id
        assert (folder / "solution" / "solve.sh").is_file(), task.task_id
        test_sh = (folder / "tests" / "test.sh").read_text()
        assert "/logs/verifier/reward." in test_sh and "cd /app" in test_sh and "LOGS_DIR" not in test_sh, task.task_id


@needs_bwrap
@pytest.mark.parametrize("task", BUNDLED, ids=[task.task_id for task in BUNDLED])
def test_bundled_task_solution_passes_and_doing_nothing_fails(task):
    solved = run_terminal_oracle(task)
    assert solved.passed and solved.score == 1.0, solved.criteria
    untouched = run_reference_agent(task, ReferenceAgent.NOP)
    assert untouched.reward == 0.0 and not untouched.grade.passed, untouched.grade.criteria
    assert untouched.grade.criteria[0].detail.startswith("verifier reward 0"), untouched.grade.criteria


@needs_bwrap
def test_sandbox_layout_and_bash_tool(tmp_path):
    task = next(t for t in BUNDLED if t.task_id == "dedupe-signups")
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    tools = TerminalToolSession(sandbox)
    assert [spec["name"] for spec in asyncio.run(tools.list_tools())] == ["bash"]
    out = asyncio.run(tools.call("bash", {"command": "pwd; ls; ls /tests /solution /logs 2>&1 | wc -l"}))
    assert "/app\nDockerfile\nsignups.txt\n" not in out.text  # the build context is not the working folder
    assert "/app\nsignups.txt\n3\n" in out.text, out.text  # three "No such file": no verifier, solution or logs
    bad = asyncio.run(tools.call("bash", {"cmd": "ls"}))
    assert bad.is_error and "missing argument 'command'" in bad.text and "unknown argument 'cmd'" in bad.text
    with pytest.raises(FileExistsError):
        create_sandbox(task, tmp_path / "sandbox")


@needs_bwrap
def test_a_reward_left_by_the_agent_does_not_count(tmp_path):
    task = next(t for t in BUNDLED if t.task_id == "top-words")
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    sandbox.logs.mkdir(parents=True)
    (sandbox.logs / "reward.txt").write_text("1\n")
    assert not grade_terminal(task, sandbox, None).passed
    assert "exit_code: 0" in (sandbox.logs / "test-stdout.txt").read_text()


@needs_bwrap
def test_task_without_environment_gets_an_empty_workdir_and_reward_json(tmp_path):
    test_sh = (
        "if [ -f /app/done.txt ]; then r=1; else r=0; fi\n"
        'echo "{\\"a\\": $r, \\"b\\": 1}" > /logs/verifier/reward.json\n'
    )
    task = harbor_task(tmp_path / "task", test_sh)
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    assert sandbox.workdir.is_dir() and not any(sandbox.workdir.iterdir())
    assert grade_terminal(task, sandbox, None).criteria[0].detail == "verifier reward 0.5 < required 1.0"
    (sandbox.workdir / "done.txt").write_text("")
    assert grade_terminal(task, sandbox, None).passed


@needs_bwrap
def test_verifier_timeout_gives_no_reward(tmp_path):
    test_sh = "sleep 5; echo 1 > /logs/verifier/reward.txt\n"
    task = harbor_task(tmp_path / "task", test_sh, toml="[verifier]\ntimeout_sec = 0.3\n")
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    result = grade_terminal(task, sandbox, None)
    assert not result.passed and "neither" in result.criteria[0].detail
    assert "timed out after 0.3 s" in (sandbox.logs / "test-stdout.txt").read_text()


def test_terminal_envs_refuse_a_task_that_is_not_harbor():
    task = BUNDLED[0].model_copy(update={"metadata": {}})
    with pytest.raises(ValueError, match="is not a Harbor task"):
        terminal_envs(task)


@needs_bwrap
def test_bash_cannot_write_the_verifier_logs_under_bwrap(tmp_path):
    task = BUNDLED[0]
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    command = "mkdir -p /logs/verifier ../logs && echo 1 > /logs/verifier/reward.txt"
    out = asyncio.run(TerminalToolSession(sandbox).call("bash", {"command": command}))
    assert not (sandbox.root / "logs").exists(), out.text  # outside the workdir only a private tmpfs is writable


@needs_bwrap
def test_terminal_rollout_through_the_agent_loop(scripted, tokenizer):
    task = next(t for t in BUNDLED if t.task_id == "dedupe-signups")
    command = "tr 'A-Z' 'a-z' < signups.txt | awk '!seen[$0]++' > unique_emails.txt && wc -l < unique_emails.txt"
    tool_call = json.dumps({"name": "bash", "arguments": {"command": command}})
    model = f"terminal-{uuid.uuid4().hex[:8]}"
    scripted.scripts[model] = [Reply(f"<tool_call>\n{tool_call}\n</tool_call>"), Reply("Done: 4 unique addresses.")]
    config = HarnessConfig(max_turns=4, max_tokens_per_turn=2000, context_budget_tokens=60_000, agent_timeout_s=60)

    async def go():
        async with CompletionsClient(scripted.url, model, timeout_s=30) as engine:
            agent = AgentSetup(engine, tokenizer, config, harness="terminal")
            return await run_group(task, terminal_envs(task), agent, group_id="g", n=2)

    trajectories = asyncio.run(go())
    assert [t.passed for t in trajectories] == [True, True]
    assert all(t.harness == "terminal" and t.reward == 1.0 for t in trajectories)
    [record] = trajectories[0].tool_calls
    assert (record.tool, record.ok, record.args["command"]) == ("bash", True, command)
    assert "stdout:\n4\n" in tokenizer.decode(trajectories[0].tokens)
