"""Sandboxes: a private copy of a world served by an MCP gateway per rollout, warm pools of them, and the resource
limits and isolation applied to the code an agent runs.

Modules, each importing only those before it: ``limits`` (rlimits + bubblewrap, imported by ``envs.apps.code_exec``),
``base`` (the contract: ``Sandbox``, ``SandboxProvider``, ``SandboxOptions``, ``SandboxTimeouts``, ``SandboxError``),
``world_copy`` (private world copies: ``fork_world``, ``WorldCopy`` reset in place), ``reaper`` (kills every live
sandbox at exit), ``copy_backed`` (what the providers share), ``local`` and ``docker`` (the providers), ``registry``
(the providers by name), ``pool`` (warm pools with reset-on-release). Nothing is imported here so that ``envs.apps``
can import ``limits`` without loading the providers.
"""
