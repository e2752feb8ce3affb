"""The docker provider: one container per sandbox from ``docker/gateway.Dockerfile``, the world copy bind-mounted at
``/world``, the gateway over stdio with ``docker exec -i CONTAINER python -m envs.mcp.gateway --world /world``.

The world copy lives on this host (``envs.sandbox.copy_backed``, as the local provider's does), so ``reset`` restores
it in place and the container and its gateway keep running. The container has no network, a memory (no swap) and
process cap from ``ResourceLimits``, and runs as this host user so the copy stays writable and deletable here.

Every container carries its owner (``envs.scratch.owner_tag`` on this host): the reaper removes a sandbox's container
at exit and on SIGTERM, and the first provider to connect after a process died of SIGKILL removes what it left.

The docker SDK is optional (``pip install rl-recipe[docker]``) and imported only when a sandbox starts; with no daemon
answering, ``start`` fails within ``CONNECT_TIMEOUT_S`` with one line saying so. ``make docker-base`` starts a daemon
(``docker/dockerd.sh``) and builds the images (``docker/build.sh``) where no registry is reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envs.mcp.client import Transport, gateway_command
from envs.sandbox.base import SandboxError, SandboxOptions, SandboxTimeouts
from envs.sandbox.copy_backed import CopyProvider, CopySandbox
from envs.sandbox.world_copy import WorldCopy
from envs.scratch import owner_alive, owner_tag

DEFAULT_IMAGE = "rl-recipe-gateway:latest"
CONNECT_TIMEOUT_S = 5.0
WORLD_IN_CONTAINER = Path("/world")
LABEL = "rl-recipe.sandbox"
"""The world copy a container serves; every sandbox container has it."""
OWNER_LABEL = "rl-recipe.owner"
"""``<host>/<pid>-<start>`` of the process that started the container."""

log = logging.getLogger(__name__)


def connect(timeout_s: float = CONNECT_TIMEOUT_S) -> Any:
    """A docker SDK client whose daemon answered a ping within ``timeout_s``, or a SandboxError saying what is wrong."""
    try:
        import docker
    except ImportError:
        raise SandboxError("the docker sandbox provider needs the docker SDK: pip install rl-recipe[docker]") from None
    try:
        client = docker.from_env(timeout=max(1, round(timeout_s)))
        client.ping()
    except docker.errors.DockerException as error:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        reason = str(error).splitlines()[0][:200]
        raise SandboxError(
            f"no Docker daemon answers at {host} ({reason}); start Docker or use the 'local' sandbox provider"
        ) from None
    return client


def this_owner() -> str:
    return f"{socket.gethostname()}/{owner_tag()}"


def sweep_orphans(client: Any) -> int:
    """Remove the sandbox containers of processes on this host that are gone (SIGKILL: no reaper ran); returns how
    many. Containers of other hosts sharing the daemon are left alone: their owners cannot be checked from here."""
    host = f"{socket.gethostname()}/"
    removed = 0
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        owner = container.labels.get(OWNER_LABEL, "")
        if owner.startswith(host) and not owner_alive(owner.removeprefix(host)):
            log.info("removing sandbox container %s of dead owner %s", container.short_id, owner)
            container.remove(force=True)
            removed += 1
    return removed


class DockerSandbox(CopySandbox):
    def __init__(self, world_id: str, copy: WorldCopy, container: Any, timeouts: SandboxTimeouts) -> None:
        super().__init__(world_id, copy, timeouts)
        self.container = container

    def stop_processes(self) -> None:
        from docker.errors import NotFound

        # NotFound: already removed (closed, then reaped; or removed by hand).
        with contextlib.suppress(NotFound):
            self.container.remove(force=True)  # ends the `docker exec` gateway with it


class DockerProvider(CopyProvider):
    """Sandboxes as containers of ``image`` on world copies under ``options.scratch``."""

    def __init__(
        self, world_root_by_id: Mapping[str, Path], options: SandboxOptions | None = None, image: str = DEFAULT_IMAGE
    ) -> None:
        super().__init__(world_root_by_id, options)
        self.image = image
        self._docker: Any = None

    async def start(self, world_id: str) -> DockerSandbox:
        options = self.options
        self.pristine(world_id)  # an unknown world fails before the daemon is asked
        if self._docker is None:
            self._docker = await asyncio.to_thread(connect)
            await asyncio.to_thread(sweep_orphans, self._docker)
        copy = await self.copy_world(world_id)
        try:
            container = await asyncio.wait_for(asyncio.to_thread(self._run, copy.root), options.timeouts.start_s)
        except BaseException:
            copy.delete()
            raise
        command = gateway_command(WORLD_IN_CONTAINER, Transport.STDIO, apps=options.apps, variants=options.variants)
        docker_exec = ["docker", "exec", "-i", container.id, "python", *command[1:]]
        # The MCP SDK hands a stdio server only a few safe variables; the docker CLI needs to find the same daemon.
        cli_env = {name: value for name, value in os.environ.items() if name.startswith("DOCKER_")}
        return await DockerSandbox(world_id, copy, container, options.timeouts).launch(docker_exec, cli_env, None)

    def _run(self, world: Path) -> Any:
        limits = self.options.limits
        return self._docker.containers.run(
            self.image,
            detach=True,
            volumes={str(world): {"bind": str(WORLD_IN_CONTAINER), "mode": "rw"}},
            network_mode="none",
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",  # no swap on top: past the cap the kernel's OOM killer acts
            pids_limit=limits.max_processes,
            user=f"{os.getuid()}:{os.getgid()}",
            environment=limits.to_env(),
            labels={LABEL: str(world), OWNER_LABEL: this_owner()},
        )
