"""The environment's choices a profile names, as plain values (no app, server or sandbox code loaded): the apps, the
sandbox providers, the known-bad tool variants, how the oracles reach the tools, and which worlds exist and which is
held out. The modules that implement each choice import it from here (a profile validates in a second)."""

from __future__ import annotations

from enum import StrEnum

APP_NAMES: tuple[str, ...] = ("calendar", "chat", "code_exec", "docs", "filesystem", "mail", "pdf", "sheets", "slides")
"""The apps of a world in the registry's order (``envs.apps`` registers each app's operations under these names;
``tests/envs/test_options.py`` checks the two agree)."""

HELDOUT_WORLD_INDEX = 3
"""World 3 of every domain is held out: none of its tasks is ever trained on (worlds 4, 5, … train)."""
DEFAULT_WORLDS_PER_DOMAIN = 3


class ProviderName(StrEnum):
    """Sandbox providers (``envs.sandbox.registry``)."""

    LOCAL = "local"
    DOCKER = "docker"


class BadVariant(StrEnum):
    """Known-bad tool variants the gateways can serve, for the de-risk gate to catch (``envs.mcp.variants``)."""

    SLIDES_RETURNS_NONE = "slides_returns_none"
    PDF_FLATTEN = "pdf_flatten"
    CODE_EXEC_NO_PACKAGES = "code_exec_no_packages"
    SLOW_CELL_READ = "slow_cell_read"


class OracleTransport(StrEnum):
    """How ``envs.check`` runs the oracles' tool calls."""

    PYTHON = "python"  # envs.apps.call_tool in this process
    INMEMORY = "inmemory"  # the MCP gateway over its in-process transport
    STDIO = "stdio"  # the MCP gateway as a stdio server in a pooled local sandbox
