"""The light list of the environment's choices agrees with the code that implements them."""

from envs.apps import TOOLS
from envs.mcp.servers import APP_NAMES as SERVED
from envs.options import APP_NAMES


def test_the_app_names_are_the_registrys_in_its_order() -> None:
    assert APP_NAMES == tuple(dict.fromkeys(tool.app for tool in TOOLS.values())) == SERVED
