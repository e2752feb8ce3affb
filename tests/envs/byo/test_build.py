"""A team's environment built into the layout every stage reads: worlds from setup commands or folders, the servers
each world carries (placeholders resolved), the task sets, a content-addressed folder reused until an input changes."""

from pathlib import Path

import pytest
import yaml

from envs.build import EnvironmentBuildError, load_manifest, load_tasks
from envs.byo.build import byo_environment_build
from envs.byo.spec import server_set_of
from envs.types import Split

WRITE_X = "import pathlib, sys; pathlib.Path(sys.argv[1], 'x.txt').write_text(sys.argv[2])"
TASK = (
    '{"id": "t%d", "world": "w%d", "split": "%s", "prompt": "Q?", '
    '"rubric": [{"kind": "answer_equals", "expected": "1"}]}'
)


def environment(folder: Path, setup: list[str] | None = None, **server) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    worlds = [{"id": f"w{i}", "setup": setup or ["{python}", "-c", WRITE_X, "{world}", str(i)]} for i in (1, 2)]
    spec = {
        "name": "mine",
        "servers": [{"name": "srv", "command": ["./server.sh", "--root", "{env_dir}"], "cwd": "{env_dir}"} | server],
        "worlds": worlds,
        "tasks": "tasks.jsonl",
    }
    (folder / "environment.yaml").write_text(yaml.safe_dump(spec))
    (folder / "tasks.jsonl").write_text("\n".join([TASK % (1, 1, "train"), TASK % (2, 2, "heldout")]) + "\n")
    return folder


def test_worlds_tasks_and_servers_land_in_the_stages_layout(tmp_path: Path) -> None:
    env = environment(tmp_path / "env")
    build = byo_environment_build(env, tmp_path / "data")
    assert build.name.startswith("env-byo-mine-") and build.parent == tmp_path / "data"
    assert (build / "worlds" / "w2" / "filesystem" / "x.txt").read_text() == "2"  # {python} ran the setup
    assert [t.split for t in load_tasks(build)] == [Split.TRAIN, Split.HELDOUT]
    manifest = load_manifest(build)
    assert manifest.world_ids == ["w1", "w2"] and manifest.source == f"file:{(env / 'environment.yaml').resolve()}"
    [server] = server_set_of(build / "worlds" / "w1").servers
    root = str(env.resolve())
    assert server.command == (f"{root}/server.sh", "--root", root) and server.cwd == root  # {env_dir}, a relative path
    assert byo_environment_build(env, tmp_path / "data") == build  # the same inputs: the same build, reused


def test_an_edited_input_gets_a_new_build(tmp_path: Path) -> None:
    env = environment(tmp_path / "env")
    first = byo_environment_build(env, tmp_path / "data")
    (env / "tasks.jsonl").write_text((env / "tasks.jsonl").read_text().replace("Q?", "Which?"))
    second = byo_environment_build(env, tmp_path / "data")
    assert second != first and load_tasks(second)[0].prompt == "Which?"


def test_a_failing_setup_names_its_world_and_shows_its_output(tmp_path: Path) -> None:
    env = environment(tmp_path / "env", setup=["{python}", "-c", "import sys; sys.exit('no repository here')"])
    with pytest.raises(EnvironmentBuildError, match="world w1: setup exited 1: no repository here"):
        byo_environment_build(env, tmp_path / "data")
    assert not list((tmp_path / "data").glob("env-byo-*"))  # nothing half-built is published
