"""Task folders written by someone else bring nothing of this host in and cannot raise their own limits.

A red-team report's findings, one test each: a Harbor task's COPY sources and files (symlinks included) resolve inside
its folder, and a reward file is never read through a link; task.toml's memory_mb is capped at the host's configured
limit; an APEX release's world zips have size and ratio caps and its task files may not be a symlinked folder; a
reward outside [0, 1], non-finite or not written as a plain decimal is an unmet criterion; a malformed
world_descriptions.json is one clear error."""

from __future__ import annotations

import logging
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from envs import apex
from envs.apex import load_apex_release, materialize_worlds
from envs.errors import RecipeError
from envs.graders import grade
from envs.harness.harbor import HarborSandbox, Phase, create_sandbox, docker_plan, task_limits, upload, verifier_reward
from envs.loaders import TaskLoadError, load_harbor
from envs.sandbox.limits import ResourceLimits
from tests.envs.harness.test_terminal import harbor_task
from tests.envs.test_apex import release  # noqa: F401  (the fixture: a copy of the fixture release)
from tests.envs.test_graders import _reward_file

SECRET = "host-secret-7c1d"
VERIFIER = "echo 1 > /logs/verifier/reward.txt\n"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A host file outside every task folder."""
    path = tmp_path / "host" / "secret.txt"
    path.parent.mkdir()
    path.write_text(f"{SECRET}\n")
    return path


def _leaked(root: Path) -> list[str]:
    """The files under ``root`` that hold the secret (links followed, as a reader on this host would)."""
    return [str(path) for path in root.rglob("*") if path.is_file() and SECRET in path.read_text(errors="replace")]


# --- 4. Harbor tasks pull host files in ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source",
    ["{secret}", "../../../host/secret.txt", "/etc/pass*"],
    ids=["absolute", "dotdot", "absolute-glob"],
)
def test_a_copy_source_outside_the_build_context_is_refused(tmp_path: Path, secret: Path, source: str) -> None:
    source = source.format(secret=secret)
    dockerfile = f"FROM ubuntu:24.04\nWORKDIR /app\nCOPY {source} /app/\n"
    task = harbor_task(tmp_path / "tasks" / "leaky", VERIFIER, environment={"Dockerfile": dockerfile})
    sandbox = tmp_path / "sandbox"
    with pytest.raises(TaskLoadError, match=r"leaky/environment: .*leaves the folder") as refused:
        create_sandbox(task, sandbox)
    assert isinstance(refused.value, RecipeError) and source in str(refused.value)
    assert _leaked(sandbox) == [] and not (sandbox / "app" / "passwd").exists()


def _plant_link(task_dir: Path, where: str, secret: Path) -> None:
    """A symlink to the host secret (or its folder) at ``where`` in the task folder."""
    links = {
        "environment-file": ("environment/data.txt", secret),
        "environment-folder": ("environment/data", secret.parent),
        "environment-itself": ("environment", secret.parent),
        "tests": ("tests/fixture.txt", secret),
        "solution": ("solution/notes.txt", secret),
    }
    relative, target = links[where]
    link = task_dir / relative
    if link.is_dir():
        shutil.rmtree(link)
    link.unlink(missing_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


@pytest.mark.parametrize("where", ["environment-file", "environment-folder", "environment-itself", "tests", "solution"])
def test_a_symlink_leaving_the_task_folder_is_refused(tmp_path: Path, secret: Path, where: str) -> None:
    dockerfile = "FROM ubuntu:24.04\nWORKDIR /app\nCOPY data.txt /app/\nCOPY data /app/data\n"
    environment = {"Dockerfile": dockerfile, "data.txt": "ok\n", "data/rows.csv": "a,b\n"}
    task_dir = tmp_path / "tasks" / "leaky"
    task = harbor_task(task_dir, VERIFIER, environment=environment)  # loaded clean: the link comes after
    (task_dir / "solution").mkdir()
    (task_dir / "solution" / "solve.sh").write_text("true\n")
    _plant_link(task_dir, where, secret)
    with pytest.raises(TaskLoadError, match=r"leaky.*leaves the folder"):
        load_harbor(task_dir)
    sandbox_root = tmp_path / "sandbox"
    with pytest.raises(TaskLoadError, match=r"leaky.*leaves the folder"):
        sandbox = create_sandbox(task, sandbox_root)
        upload(task, sandbox, Phase.ORACLE)
        upload(task, sandbox, Phase.VERIFIER)
    assert _leaked(sandbox_root) == []


def test_a_symlinked_environment_is_refused_for_the_docker_build(tmp_path: Path, secret: Path) -> None:
    (secret.parent / "Dockerfile").write_text("FROM ubuntu:24.04\nCOPY secret.txt /app/\n")
    task_dir = tmp_path / "tasks" / "leaky"
    task = harbor_task(task_dir, VERIFIER, environment={"Dockerfile": "FROM ubuntu:24.04\n"})
    _plant_link(task_dir, "environment-itself", secret)
    with pytest.raises(TaskLoadError, match=r"leaky: field 'environment': .*leaves the folder"):
        docker_plan(task, HarborSandbox(tmp_path / "sandbox"))


def test_a_reward_file_linked_to_a_host_file_is_not_read(tmp_path: Path, secret: Path) -> None:
    task = harbor_task(tmp_path / "tasks" / "linker", VERIFIER)
    sandbox = HarborSandbox(tmp_path / "sandbox")
    sandbox.logs.mkdir(parents=True)
    (sandbox.logs / "reward.txt").symlink_to(secret)  # what `ln -s <host file> /logs/verifier/reward.txt` leaves
    [criterion] = grade(task, None, sandbox.root, sandbox.root).criteria
    assert not criterion.passed and SECRET not in criterion.detail
    assert "reward.txt is a symbolic link" in criterion.detail
    assert verifier_reward(sandbox) == 0.0


# --- 5. a task raises its own memory cap -----------------------------------------------------------------------------


@pytest.mark.parametrize("asked", [100_000, 1_000_000_000_000])
def test_task_toml_cannot_raise_the_memory_cap(tmp_path: Path, caplog: pytest.LogCaptureFixture, asked: int) -> None:
    toml = f'[environment]\ndocker_image = "ubuntu:24.04"\nmemory_mb = {asked}\n'
    task = harbor_task(tmp_path / "greedy", VERIFIER, toml)
    host = ResourceLimits()
    with caplog.at_level(logging.WARNING):
        assert task_limits(task, host).memory_mb == host.memory_mb == 4096
    assert "greedy" in caplog.text and f"memory_mb = {asked}" in caplog.text
    assert docker_plan(task, HarborSandbox(tmp_path / "sandbox"), host).memory_mb == 4096


def test_task_toml_may_lower_the_memory_cap(tmp_path: Path) -> None:
    task = harbor_task(tmp_path / "frugal", VERIFIER, "[environment]\nmemory_mb = 1024\n")
    assert task_limits(task, ResourceLimits()).memory_mb == 1024
    assert task_limits(task, ResourceLimits(memory_mb=512)).memory_mb == 512


# --- 6. APEX releases ------------------------------------------------------------------------------------------------


def _add_entry(root: Path, name: str, chunks: int, chunk: bytes) -> None:
    """Append ``name`` (``chunks`` times ``chunk``, deflated) to the release's world zip."""
    world_zip = root / "world_files_zipped" / "world_fixture_ib.zip"
    with (
        zipfile.ZipFile(world_zip, "a", zipfile.ZIP_DEFLATED) as zipped,
        zipped.open(name, "w", force_zip64=True) as out,
    ):
        for _ in range(chunks):
            out.write(chunk)


def test_a_zip_bomb_is_refused_before_it_is_unzipped(release: Path, tmp_path: Path) -> None:  # noqa: F811
    _add_entry(release, "filesystem/bomb.bin", 64, bytes(1 << 20))  # 64 MiB of zeros: ~64 KiB zipped
    with pytest.raises(TaskLoadError, match=r"world_fixture_ib\.zip: .*bomb\.bin.*compressed .* times"):
        materialize_worlds(release, load_apex_release(release), tmp_path / "worlds")
    assert not (tmp_path / "worlds" / "world_fixture_ib").exists()


@pytest.mark.parametrize(("cap", "sizes_mib"), [("MAX_ENTRY_BYTES", [3]), ("MAX_WORLD_BYTES", [1, 1, 1])])
def test_a_world_over_the_size_caps_is_refused(
    release: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cap: str,
    sizes_mib: list[int],
) -> None:
    monkeypatch.setattr(apex, cap, 2 << 20)
    for index, size in enumerate(sizes_mib):
        _add_entry(release, f"filesystem/big{index}.bin", size, os.urandom(1 << 20))  # random: no compression
    with pytest.raises(TaskLoadError, match=r"world_fixture_ib\.zip: .*unzips to \d+ bytes, over the cap"):
        materialize_worlds(release, load_apex_release(release), tmp_path / "worlds")


@pytest.mark.parametrize("linked", ["task_files/apex-memo", "task_files"])
def test_a_symlinked_task_files_folder_is_refused(release: Path, tmp_path: Path, linked: str) -> None:  # noqa: F811
    host = tmp_path / "host"
    (host / "apex-memo" / "filesystem").mkdir(parents=True)
    (host / "apex-memo" / "filesystem" / "stolen.txt").write_text(SECRET)
    if linked == "task_files/apex-memo":
        host = host / "apex-memo"
    shutil.rmtree(release / linked)
    (release / linked).symlink_to(host)
    with pytest.raises(TaskLoadError, match=r"field 'task_files/apex-memo': .*symbolic link"):
        materialize_worlds(release, load_apex_release(release), tmp_path / "worlds")
    assert _leaked(tmp_path / "worlds") == []


def test_world_descriptions_of_strings_name_the_file_and_entry(release: Path) -> None:  # noqa: F811
    (release / "world_descriptions.json").write_text('{"world_fixture_ib": "A one-note world"}')
    with pytest.raises(TaskLoadError, match=r"world_descriptions\.json, entry 'world_fixture_ib': must be an object"):
        load_apex_release(release)


# --- 7. reward values ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("reward.txt", "inf"),
        ("reward.txt", "1e308"),
        ("reward.txt", "1_0"),
        ("reward.txt", "nan"),
        ("reward.txt", "١"),  # an Arabic-Indic one: float() reads it as 1.0
        ("reward.txt", "1.5"),
        ("reward.txt", "-0.5"),
        ("reward.json", '{"reward": Infinity}'),
        ("reward.json", '{"reward": 1e400}'),
        ("reward.json", '{"reward": 10}'),
        ("reward.json", '{"tests": 1, "style": NaN}'),
        ("reward.json", '{"tests": 3, "style": -1}'),  # mean 1.0, each out of range
    ],
)
def test_a_reward_outside_0_1_or_not_a_plain_number_is_unmet(tmp_path: Path, name: str, content: str) -> None:
    task = harbor_task(tmp_path / "task", VERIFIER)
    _reward_file(tmp_path / "sandbox", name, content)
    [criterion] = grade(task, None, tmp_path / "sandbox", tmp_path / "sandbox").criteria
    assert not criterion.passed
    assert "not a number in [0, 1]" in criterion.detail, criterion.detail


@pytest.mark.parametrize(
    ("name", "content", "reward"),
    [
        ("reward.txt", " 1\n", 1.0),
        ("reward.txt", "+1.0e0", 1.0),
        ("reward.txt", ".5", 0.5),
        ("reward.json", '{"a": 1}', 1),
    ],
)
def test_a_plain_reward_in_range_still_counts(tmp_path: Path, name: str, content: str, reward: float) -> None:
    _reward_file(tmp_path / "sandbox", name, content)
    assert verifier_reward(HarborSandbox(tmp_path / "sandbox")) == reward
