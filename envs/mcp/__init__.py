"""MCP tool servers over the app operations, the per-world gateway, its client and the known-bad tool variants.

Read in this order: ``variants`` (how a tool is run, correct or deliberately broken), ``servers`` (the MCP servers),
``gateway`` (the process entry point), ``client`` (``GatewayClient`` over in-memory, stdio or HTTP), ``oracle``.
"""
