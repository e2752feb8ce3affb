"""Subcommands of the ``recipe`` CLI: one module per area, each with ``register(subparsers)``.

``cli.main`` adds every module of this package, so a new area is a new file here.
"""
