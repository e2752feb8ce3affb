"""Bring your own environment: a team's MCP servers, worlds and task files through the seven gates.

* ``spec`` — the environment file (servers, worlds, tasks, probes) and the task file, validated;
* ``build`` — the environment as a build every stage reads (worlds carry ``mcp_servers.json``);
* ``servers`` — a world's servers as one tool session (``ExternalTools``) and as one gateway (``build_proxy``);
* ``probes`` — de-risk without oracles: the servers' start, schema and user probes.

Details and a worked example: docs/environments.md.
"""
