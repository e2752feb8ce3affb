"""Harbor tasks written elsewhere, run unchanged: ``/app``, ``/tests``, ``/solution``, ``/logs/verifier``; Harbor's
oracle and nop agents as the validity gate; partial credit from reward.json; the Dockerfile subset; the docker plan."""

from pathlib import Path

import pytest

from envs.check import check_harbor_tasks
from envs.harness.dockerfile import Copy, DockerfileError, Run, read_dockerfile
from envs.harness.harbor import (
    Phase,
    create_sandbox,
    docker_plan,
    run_in_phase,
    run_verifier,
    task_limits,
    verifier_reward,
)
from envs.harness.terminal import ReferenceAgent, run_reference_agent
from envs.loaders import load_harbor, load_harbor_dir
from envs.sandbox.limits import Mount, ResourceLimits, usable_bwrap

EXTERNAL = Path(__file__).parents[1] / "data" / "harbor_external"
TASKS = {task.task_id: task for task in load_harbor_dir(EXTERNAL)}
needs_bwrap = pytest.mark.skipif(
    usable_bwrap() is None, reason="bubblewrap cannot create a sandbox here: Harbor's /app, /tests need its mounts"
)


@needs_bwrap
@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_external_task_oracle_scores_1_and_nop_0(task_id):
    oracle = run_reference_agent(TASKS[task_id], ReferenceAgent.ORACLE)
    assert (oracle.reward, oracle.grade.passed) == (1.0, True), oracle.grade.criteria
    nop = run_reference_agent(TASKS[task_id], ReferenceAgent.NOP)
    assert (nop.reward, nop.grade.passed) == (0.0, False), nop.grade.criteria


@needs_bwrap
def test_partial_credit_is_the_mean_of_reward_json_keys(tmp_path):
    task = TASKS["word-report"]
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    result = run_in_phase(sandbox, Phase.AGENT, "mkdir -p report && echo 10 > report/count.txt", 10, None)
    assert result.exit_code == 0, result.render(10)
    run_verifier(task, sandbox)
    assert (sandbox.logs / "reward.json").read_text() == '{"count": 1, "longest": 0}\n'
    assert verifier_reward(sandbox) == 0.5


@needs_bwrap
def test_each_phase_sees_only_its_paths(tmp_path):
    task = TASKS["fib-cli"]
    sandbox = create_sandbox(task, tmp_path / "sandbox")
    assert sorted(path.name for path in sandbox.workdir.iterdir()) == ["numbers.txt", "out"]  # COPY, then RUN
    probe = "pwd; for p in /tests /solution /logs/verifier; do [ -e $p ] && echo $p; done; true"
    seen = {phase: run_in_phase(sandbox, phase, probe, 10, None).stdout.split() for phase in Phase}
    assert seen[Phase.AGENT] == ["/app"]  # the agent never sees the verifier or the solution
    sandbox.solution.mkdir()
    sandbox.tests.mkdir()
    sandbox.logs.mkdir(parents=True)
    assert run_in_phase(sandbox, Phase.ORACLE, probe, 10, None).stdout.split() == ["/app", "/solution"]
    assert run_in_phase(sandbox, Phase.VERIFIER, probe, 10, None).stdout.split() == ["/app", "/tests", "/logs/verifier"]


@needs_bwrap
def test_check_reports_a_task_whose_oracle_does_not_solve_it_as_invalid(tmp_path):
    broken = tmp_path / "tasks" / "broken"
    (broken / "tests").mkdir(parents=True)
    (broken / "solution").mkdir()
    (broken / "instruction.md").write_text("Create /app/done.\n")
    (broken / "task.toml").write_text("")
    (broken / "tests" / "test.sh").write_text(
        "[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    (broken / "solution" / "solve.sh").write_text("echo not done\n")
    [result] = check_harbor_tasks([load_harbor(broken)])
    assert (result.valid, result.oracle_reward, result.nop_reward, result.error) == (False, 0.0, 0.0, None)
    assert all(result.valid for result in check_harbor_tasks(TASKS.values()))


def test_task_toml_resources_and_timeouts():
    task = TASKS["fib-cli"]
    assert task.metadata["environment"] == {
        "docker_image": None, "build_timeout_sec": 120.0, "cpus": 1.0, "memory_mb": 2048, "storage_mb": 1024,
    }  # fmt: skip
    assert (task.metadata["agent_timeout_sec"], task.metadata["verifier_timeout_sec"]) == (120.0, 60.0)
    assert task_limits(task, ResourceLimits(memory_mb=8192)).memory_mb == 2048
    assert task_limits(task, ResourceLimits(memory_mb=512)).memory_mb == 512  # never above the host's cap


def test_the_dockerfile_steps_the_local_provider_follows(tmp_path):
    recipe = read_dockerfile(EXTERNAL / "fib-cli" / "environment" / "Dockerfile")
    assert recipe.workdir == "/app"
    assert recipe.steps == (
        Copy(("numbers.txt",), "/app/numbers.txt", "/app"),
        Run("mkdir -p /app/out &&  chmod 777 /app/out", "/app"),
    )
    assert read_dockerfile(tmp_path / "none").workdir == "/app"
    (tmp_path / "Dockerfile").write_text("FROM a AS build\nFROM b\nWORKDIR /src\nCOPY --from=build /x /src/\n")
    with pytest.raises(DockerfileError, match="multi-stage"):
        read_dockerfile(tmp_path / "Dockerfile")


@needs_bwrap  # create_sandbox follows the RUN step
def test_docker_plan_builds_the_dockerfile_or_uses_the_image(tmp_path):
    fib = TASKS["fib-cli"]
    plan = docker_plan(fib, create_sandbox(fib, tmp_path / "fib"))
    assert (
        plan.build is not None
        and plan.build.dockerfile == EXTERNAL.resolve() / "fib-cli" / "environment" / "Dockerfile"
    )
    assert (plan.image, plan.workdir, plan.cpus, plan.memory_mb) == (
        "rl-recipe-harbor-fib-cli:latest",
        "/app",
        1.0,
        2048,
    )
    assert plan.volumes == (Mount(tmp_path.resolve() / "fib" / "logs" / "verifier", "/logs/verifier"),)
    assert [mount.target for mount in plan.uploads[Phase.VERIFIER]] == ["/tests"]
    assert [mount.target for mount in plan.uploads[Phase.ORACLE]] == ["/solution"]
    words = TASKS["word-report"]
    plan = docker_plan(words, create_sandbox(words, tmp_path / "words"))
    assert (plan.build, plan.image) == (None, "ubuntu:24.04")
