"""The light list of the environment's choices agrees with the code that implements them."""

import subprocess
import sys
from pathlib import Path

from envs.apps import TOOLS
from envs.mcp.servers import APP_NAMES as SERVED
from envs.options import APP_NAMES

REPO = Path(__file__).resolve().parents[2]


def test_the_app_names_are_the_registrys_in_its_order() -> None:
    assert APP_NAMES == tuple(dict.fromkeys(tool.app for tool in TOOLS.values())) == SERVED


def test_the_registry_order_holds_whichever_app_loaded_first() -> None:
    """The order is the tool listing the base was taught with: a process that called a sheets tool before it listed
    every tool (a gateway after a probe) must list them as any other."""
    probe = (
        "from envs.apps import base; base.load_apps('sheets', 'mail'); from envs.apps import TOOLS; print(list(TOOLS))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(list(TOOLS))
