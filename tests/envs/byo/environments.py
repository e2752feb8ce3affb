"""Built team environments for the tests: the shipped examples over real third-party MCP servers, and small ones
written here (``environment``), each built into a test's data root. ``servers_installed`` is the fixture the test
modules use (autouse) to say what is missing, rather than failing on a missing command."""

import sys
from pathlib import Path

import pytest
import yaml

from envs.byo.build import SERVER_FOLDERS, byo_environment_build

EXAMPLES = Path(__file__).parents[3] / "examples" / "environments"
FIXTURE_SERVER = [sys.executable, str(Path(__file__).with_name("fixture_server.py"))]
TASK = (
    '{"id": "%s", "world": "w%d", "split": "%s", "prompt": "Q?", '
    '"rubric": [{"kind": "answer_contains_all", "items": ["x"]}]}'
)


@pytest.fixture(scope="module", autouse=True)
def servers_installed() -> None:
    venvs, npm_bin = SERVER_FOLDERS
    missing = [p for p in (venvs / "git", venvs / "sqlite", venvs / "verifiers", npm_bin) if not p.exists()]
    if missing:
        pytest.fail(f"third-party MCP servers missing ({', '.join(map(str, missing))}): make install-mcp-servers")


def example(name: str, data: Path) -> Path:
    """The build of a shipped example under ``data``."""
    return byo_environment_build(EXAMPLES / name, data)


def environment(folder: Path, servers: list[dict], probes: dict | None = None, worlds: int = 2) -> Path:
    """An environment file in ``folder`` with ``servers``, ``worlds`` empty folders (w1, w2 …) and a task on each."""
    (folder / "empty").mkdir(parents=True, exist_ok=True)
    spec = {
        "name": "fixture",
        "servers": servers,
        "worlds": [{"id": f"w{i}", "folder": "empty"} for i in range(1, worlds + 1)],
        "tasks": "tasks.jsonl",
        "probes": probes or {},
    }
    (folder / "environment.yaml").write_text(yaml.safe_dump(spec))
    rows = [TASK % (f"t{i}", i, "heldout" if i == worlds else "train") for i in range(1, worlds + 1)]
    (folder / "tasks.jsonl").write_text("\n".join(rows) + "\n")
    return folder / "environment.yaml"
