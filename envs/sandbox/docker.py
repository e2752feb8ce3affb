"""The docker provider: one container per sandbox from ``docker/gateway.Dockerfile``, the world copy bind-mounted at
``/world``, the gateway over stdio with ``docker exec -i CONTAINER python -m envs.mcp.gateway --world /world``.

The world copy lives on this host (``LocalProvider``'s ``WorldCopy``), so ``reset`` restores it in place exactly as
the local provider does, and the container and its gateway keep running. The container has no network, a memory and
process cap from ``ResourceLimits``, and runs as this host user so the copy stays writable and deletable here.

The docker SDK is optional (``pip install rl-recipe[docker]``) and imported only when a sandbox starts; with no daemon
answering, ``start`` fails within ``CONNECT_TIMEOUT_S`` with one line saying so.

    docker build -f docker/gateway.Dockerfile -t rl-recipe-gateway:latest .
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envs.mcp.client import Transport, gateway_command
from envs.mcp.variants import BadVariant
from envs.sandbox.base import REAPER, ProviderName, Sandbox, SandboxError, SandboxProvider, SandboxTimeouts, register
from envs.sandbox.limits import ResourceLimits
from envs.sandbox.local import Pristine, WorldCopy, open_gateway
from envs.scratch import owned_folder

DEFAULT_IMAGE = "rl-recipe-gateway:latest"
CONNECT_TIMEOUT_S = 5.0
WORLD_IN_CONTAINER = Path("/world")
LABEL = "rl-recipe.sandbox"


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


class DockerSandbox(Sandbox):
    def __init__(self, world_id: str, copy: WorldCopy, container: Any, timeouts: SandboxTimeouts) -> None:
        super().__init__(world_id, copy.root, timeouts)
        self.copy, self.container = copy, container

    async def reset(self) -> None:
        try:
            await asyncio.wait_for(asyncio.to_thread(self.copy.restore), self.timeouts.reset_s)
        except TimeoutError as error:
            raise SandboxError(f"resetting {self.world_root} took over {self.timeouts.reset_s:g} s") from error

    async def close(self) -> None:
        try:
            await self.close_client()
        finally:
            REAPER.untrack(self)
            await asyncio.wait_for(asyncio.to_thread(self.kill), self.timeouts.teardown_s)

    def kill(self) -> None:
        self.container.remove(force=True)  # ends the `docker exec` gateway with it
        if self.world_root.exists():
            self.copy.delete()


@register(ProviderName.DOCKER)
class DockerProvider(SandboxProvider):
    """Sandboxes as containers of ``image`` on world copies under ``scratch``."""

    def __init__(
        self,
        world_root_by_id: Mapping[str, Path],
        timeouts: SandboxTimeouts | None = None,
        limits: ResourceLimits | None = None,
        scratch: Path | None = None,
        apps: Sequence[str] | None = None,
        image: str = DEFAULT_IMAGE,
        variants: frozenset[BadVariant] = frozenset(),
    ) -> None:
        super().__init__(world_root_by_id, timeouts, apps, variants)
        self.limits = limits or ResourceLimits.from_env()
        self.scratch = scratch or Path(tempfile.gettempdir()) / "rl-recipe-sandboxes"
        self.image = image
        self._pristine: dict[str, Pristine] = {}
        self._docker: Any = None

    async def start(self, world_id: str) -> DockerSandbox:
        pristine = self.pristine(world_id)
        if self._docker is None:
            self._docker = await asyncio.to_thread(connect)
        if world_id not in self._pristine:
            self._pristine[world_id] = await asyncio.to_thread(Pristine.scan, pristine.resolve())
        root = (owned_folder(self.scratch) / f"{world_id}-{uuid.uuid4().hex[:12]}").resolve()
        copy = await asyncio.wait_for(
            asyncio.to_thread(WorldCopy.create, self._pristine[world_id], root), self.timeouts.start_s
        )
        try:
            container = await asyncio.wait_for(asyncio.to_thread(self._run, copy.root), self.timeouts.start_s)
        except BaseException:
            copy.delete()
            raise
        sandbox = DockerSandbox(world_id, copy, container, self.timeouts)
        REAPER.track(sandbox)
        try:
            command = gateway_command(WORLD_IN_CONTAINER, Transport.STDIO, apps=self.apps, variants=self.variants)
            docker_exec = ["docker", "exec", "-i", container.id, "python", *command[1:]]
            await sandbox.open_client(open_gateway(docker_exec, {}, None, self.timeouts))
        except BaseException:
            await sandbox.close()
            raise
        return sandbox

    def _run(self, world: Path) -> Any:
        limits = self.limits
        return self._docker.containers.run(
            self.image,
            detach=True,
            volumes={str(world): {"bind": str(WORLD_IN_CONTAINER), "mode": "rw"}},
            network_mode="none",
            mem_limit=f"{limits.memory_mb}m",
            pids_limit=limits.max_processes,
            user=f"{os.getuid()}:{os.getgid()}",
            environment=limits.to_env(),
            labels={LABEL: str(world)},
        )
