"""The local provider: a private copy of the world in a scratch folder (``envs.sandbox.copy_backed``) and a stdio
gateway process on it, its code execution under the options' ``ResourceLimits``.

Example::

    provider = LocalProvider({"ib-1": Path("data/worlds/ib-1")}, SandboxOptions(limits=ResourceLimits(cpu_s=30)))
    sandbox = await provider.start("ib-1")
"""

from __future__ import annotations

from envs.mcp.client import Transport, gateway_command
from envs.sandbox.copy_backed import CopyProvider, CopySandbox
from envs.scratch import kill_processes, processes_of


class LocalSandbox(CopySandbox):
    def stop_processes(self) -> None:
        kill_processes(processes_of(self.world_root))


class LocalProvider(CopyProvider):
    """Sandboxes as world copies under ``options.scratch``, each with a stdio gateway running in the copy."""

    async def start(self, world_id: str) -> LocalSandbox:
        options = self.options
        copy = await self.copy_world(world_id)
        command = gateway_command(
            copy.root, Transport.STDIO, apps=options.apps, variants=options.variants, faults=options.faults
        )
        return await LocalSandbox(world_id, copy, options.timeouts).launch(command, options.limits.to_env(), copy.root)
