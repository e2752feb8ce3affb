"""The docker provider without a daemon (this machine has only the CLI): a clear one-line error within seconds."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from envs.sandbox.base import SandboxError, SandboxOptions
from envs.sandbox.registry import make_provider


def test_no_daemon_fails_fast_and_clearly(pristine_world: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    provider = make_provider("docker", {"w1": pristine_world}, SandboxOptions(scratch=tmp_path / "scratch"))
    started = time.monotonic()
    with pytest.raises(SandboxError, match=r"no Docker daemon answers at unix://.*no-daemon.sock") as caught:
        asyncio.run(provider.start("w1"))
    assert time.monotonic() - started < 10
    assert "\n" not in str(caught.value) and "'local' sandbox provider" in str(caught.value)
    assert not (tmp_path / "scratch").exists()  # nothing was copied for a sandbox that cannot start


def test_missing_sdk_names_the_extra(pristine_world: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # `import docker` now raises ImportError
    provider = make_provider("docker", {"w1": pristine_world})
    with pytest.raises(SandboxError, match=r"pip install rl-recipe\[docker\]"):
        asyncio.run(provider.start("w1"))
