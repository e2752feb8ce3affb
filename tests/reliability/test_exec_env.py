"""Model-run code sees a minimal environment of its own, never the trainer's (where judge keys and tokens live)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envs.apps import World, call_tool
from envs.harness.code_tools import run_bash

CANARY = "RL_RECIPE_TEST_JUDGE_KEY"
PRINT_ENV = "python -c 'import json, os, tempfile; tempfile.mkstemp(); print(json.dumps(dict(os.environ)))'"


def _world(root: Path) -> Path:
    (root / "filesystem").mkdir(parents=True)
    return root


def _env_via_run_python(world: Path) -> str:
    code = "import json, os, tempfile; tempfile.mkstemp(); print(json.dumps(dict(os.environ)))"
    return call_tool(World(world), "code_exec.run_python", {"code": code})


def _env_via_run_bash(world: Path) -> str:
    return call_tool(World(world), "code_exec.run_bash", {"command": PRINT_ENV})


def _env_via_harness_bash(world: Path) -> str:  # the code-only and the terminal harness's bash tool
    return run_bash(PRINT_ENV, cwd=world / "filesystem", writable=world, timeout_s=30, limits=None).render(30)


@pytest.mark.parametrize("launch", [_env_via_run_python, _env_via_run_bash, _env_via_harness_bash])
def test_model_run_code_cannot_see_the_trainers_secrets(tmp_path: Path, monkeypatch, launch) -> None:
    monkeypatch.setenv(CANARY, "sk-canary-secret")
    output = launch(_world(tmp_path / "world"))
    assert "sk-canary-secret" not in output
    stdout = output.split("stdout:\n", 1)[1].split("\nstderr:", 1)[0]
    env = json.loads(stdout)
    assert CANARY not in env
    assert {"PATH", "HOME", "TMPDIR", "LANG"} <= set(env)
    # HOME and TMPDIR are the launch's own scratch folder (writable: mkstemp succeeded), not the trainer's
    assert env["HOME"] == env["TMPDIR"] != os.environ.get("HOME")
    assert not Path(env["TMPDIR"]).exists()  # removed after the launch
