"""A tiny world for the sandbox tests: two text files, a folder and a mailbox (no gateway needed to build it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def pristine_world(tmp_path: Path) -> Path:
    root = tmp_path / "pristine" / "w1"
    (root / "filesystem" / "notes").mkdir(parents=True)
    (root / "filesystem" / "data").mkdir()
    (root / "apps_data" / "mail").mkdir(parents=True)
    (root / "filesystem" / "notes" / "a.txt").write_text("alpha\n")
    (root / "filesystem" / "data" / "b.csv").write_text("x,y\n1,2\n")
    (root / "apps_data" / "mail" / "mailbox.json").write_text(json.dumps({"messages": []}))
    return root
