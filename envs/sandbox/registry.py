"""The sandbox providers by name, and ``make_provider``: what a config's ``sandbox: local | docker`` selects.

The registry sits above the providers (it imports them; they know nothing of it). Importing it is cheap: the docker
provider imports its SDK only when a sandbox starts.

Example::

    provider = make_provider(ProviderName.DOCKER, {"ib-1": Path("data/worlds/ib-1")}, SandboxOptions(apps=("sheets",)))
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from envs.options import ProviderName
from envs.sandbox.base import SandboxOptions, SandboxProvider
from envs.sandbox.docker import DockerProvider
from envs.sandbox.local import LocalProvider

PROVIDERS: dict[ProviderName, type[SandboxProvider]] = {
    ProviderName.LOCAL: LocalProvider,
    ProviderName.DOCKER: DockerProvider,
}


def make_provider(
    name: ProviderName | str, world_root_by_id: Mapping[str, Path], options: SandboxOptions | None = None
) -> SandboxProvider:
    """The provider ``name`` (``local`` or ``docker``) on ``world_root_by_id``, its sandboxes as ``options`` say."""
    try:
        key = ProviderName(name)
    except ValueError:
        raise ValueError(f"unknown sandbox provider {name!r}; providers are: {', '.join(ProviderName)}") from None
    return PROVIDERS[key](world_root_by_id, options)
