"""World ib-1 from the world generator, built once per session and copied per test (tools write to it).

Facts of ib-1 (seed 0) the tests rely on, read off the generated files: reference/fx_eur_usd.txt holds "1.0821";
models/comps.xlsx has one sheet "Comps" with A1 "Company"; reports/target_overview.pdf page 2 is a two-column page and
page 3 holds the financials table; message m001 has the attachment operating_model.xlsx; channels deal-team and general;
event e003 is "Investment committee".
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envs.worlds import generate_world


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def world_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "ib-1"
    generate_world("ib-1", root)
    return root


@pytest.fixture
def world_dir(world_template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(world_template, tmp_path / "world", symlinks=True))


@pytest.fixture
def twin_dir(world_template: Path, tmp_path: Path) -> Path:
    """A second copy of the world: the same tool call run directly on it must give the same text as over MCP."""
    return Path(shutil.copytree(world_template, tmp_path / "twin", symlinks=True))
