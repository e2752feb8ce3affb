"""Every third-party module the packages import is declared in pyproject.toml, and every declared one is used.

deptry reads the imports with the configuration in ``[tool.deptry]`` (dev tools are a dev group, vllm is a program
the cluster runs); requirements.lock pins what CI installed.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_imports_match_the_declared_dependencies() -> None:
    deptry = Path(sys.executable).with_name("deptry")
    done = subprocess.run([str(deptry), "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lock_pins_every_declared_dependency() -> None:
    pinned = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    names = {_name(spec) for spec in declared}
    assert names - pinned == set()


def _name(spec: str) -> str:
    for stop in "<>=!;[ ":
        spec = spec.split(stop)[0]
    return spec.strip().lower().replace("_", "-")
