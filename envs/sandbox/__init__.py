"""Sandboxes: a private copy of a world served by an MCP gateway per rollout, warm pools of them, and the resource
limits and isolation applied to the code an agent runs.

Modules: ``limits`` (rlimits + bubblewrap, imported by ``envs.apps.code_exec``), ``base`` (the provider contract and
registry), ``local`` and ``docker`` (providers), ``pool`` (warm pools with reset-on-release). Nothing is imported
here so that ``envs.apps`` can import ``limits`` without loading the providers.
"""
