"""Harbor tasks through the docker provider on a real daemon (``make test-docker``): the task's image built from
``environment/Dockerfile`` (a missing base image replaced by ``rl-recipe-base:bookworm``), one container per sample
with no network and task.toml's resources, ``/solution`` only for the oracle, ``/tests`` only for the verifier, the
agent timeout honoured. Skipped with the reason when no daemon answers or the base image is not built."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from envs.check import HarborProvider, check_harbor_tasks
from envs.harness.harbor import Phase
from envs.harness.harbor_docker import (
    BASE_IMAGE,
    HARBOR_LABEL,
    harbor_container,
    resolve_dockerfile,
    run_reference_agent_docker,
)
from envs.harness.terminal import BUNDLED_TERMINAL_TASKS, ReferenceAgent
from envs.loaders import load_harbor, load_harbor_dir
from envs.oracle import OracleError
from envs.sandbox.base import SandboxError

pytestmark = pytest.mark.docker
EXTERNAL = Path(__file__).parents[1] / "data" / "harbor_external"
TASKS = {task.task_id: task for task in load_harbor_dir(EXTERNAL)}
BUNDLED = ("csv-region-totals", "fix-median-bug", "organize-downloads")
FOLDERS = [EXTERNAL / name for name in sorted(TASKS)] + [BUNDLED_TERMINAL_TASKS / name for name in BUNDLED]
PROBE = "pwd; for p in /tests /solution /logs/verifier; do [ -e $p ] && echo $p; done; ls /sys/class/net; true"


@pytest.fixture(scope="module")
def daemon() -> Any:
    pytest.importorskip("docker", reason="the docker SDK is not installed (pip install rl-recipe[docker])")
    from envs.harness.harbor_docker import docker_client, image_present

    try:
        client = docker_client()
    except SandboxError as error:
        pytest.skip(f"{error} (`make test-docker` starts one)")
    if not image_present(client, BASE_IMAGE):
        pytest.skip(f"image {BASE_IMAGE} is not built: run `make docker-base`")
    return client


def harbor_containers(client: Any, task_id: str) -> list[Any]:
    return client.containers.list(all=True, filters={"label": f"{HARBOR_LABEL}={task_id}"})


def test_a_missing_base_image_is_replaced_and_fetching_steps_get_the_network() -> None:
    text = "FROM python:3.13-slim AS build\nRUN pip install x\nFROM build\nFROM here:1\nCOPY a /app/\n"
    resolved = resolve_dockerfile(text, lambda image: image == "here:1")
    assert resolved.text == f"FROM {BASE_IMAGE} AS build\nRUN pip install x\nFROM build\nFROM here:1\nCOPY a /app/\n"
    assert (resolved.bases, resolved.needs_network) == ((BASE_IMAGE, "build", "here:1"), True)
    assert [note.split(":")[0] for note in resolved.notes] == ["FROM python"]
    assert not resolve_dockerfile("FROM x\nRUN mkdir -p /app/out \\\n  && chmod 777 /app/out\n", bool).needs_network


@pytest.mark.parametrize("folder", FOLDERS, ids=[folder.name for folder in FOLDERS])
def test_oracle_scores_1_and_nop_0_in_a_container(daemon: Any, folder: Path) -> None:
    task = load_harbor(folder)
    started = time.perf_counter()
    [result] = check_harbor_tasks([task], provider=HarborProvider.DOCKER)
    print(f"{task.task_id}: oracle + nop in docker {time.perf_counter() - started:.2f} s")
    assert (result.error, result.oracle_reward, result.nop_reward, result.valid) == (None, 1.0, 0.0, True)
    assert not harbor_containers(daemon, task.task_id)


def test_each_phase_sees_only_its_paths_with_no_network_and_the_task_resources(daemon: Any, tmp_path: Path) -> None:
    task = TASKS["fib-cli"]
    with harbor_container(task, tmp_path / "sandbox") as box:
        seen = {Phase.AGENT: box.exec(PROBE, 10).stdout.split()}
        box.upload(Phase.ORACLE)
        seen[Phase.ORACLE] = box.exec(PROBE, 10).stdout.split()
        box.upload(Phase.VERIFIER)
        files = box.exec("ls /app /app/out /solution /tests", 10).stdout.split()
        host = box.container.attrs["HostConfig"]
        [running] = harbor_containers(daemon, task.task_id)
    assert seen[Phase.AGENT] == ["/app", "/logs/verifier", "lo"]  # no /tests, no /solution; loopback only
    assert seen[Phase.ORACLE] == ["/app", "/solution", "/logs/verifier", "lo"]
    assert {"numbers.txt", "out", "solve.sh", "test.sh", "test_outputs.py"} <= set(files)  # COPY, RUN, docker cp
    assert (host["NetworkMode"], host["NanoCpus"], host["Memory"]) == ("none", 10**9, 2048 * 2**20)
    assert running.id == box.container.id and not harbor_containers(daemon, task.task_id)


def test_an_oracle_past_the_agent_timeout_ends_as_a_timeout(daemon: Any, tmp_path: Path) -> None:
    slow = tmp_path / "slow-oracle"
    for folder in ("environment", "solution", "tests"):
        (slow / folder).mkdir(parents=True)
    (slow / "instruction.md").write_text("Create /app/done.\n")
    (slow / "task.toml").write_text("[agent]\ntimeout_sec = 2.0\n")
    (slow / "environment" / "Dockerfile").write_text("FROM python:3.12-slim-bookworm\nWORKDIR /app\n")
    (slow / "solution" / "solve.sh").write_text("sleep 300 & sleep 300\ntouch /app/done\n")
    (slow / "tests" / "test.sh").write_text("[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt\n")
    task = load_harbor(slow)
    started = time.perf_counter()
    with pytest.raises(OracleError, match="timed out after 2 s"):
        run_reference_agent_docker(task, ReferenceAgent.ORACLE)
    assert time.perf_counter() - started < 30
    assert not harbor_containers(daemon, task.task_id)
