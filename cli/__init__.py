"""The ``recipe`` command line (``cli.main``): one module per area in ``cli.commands``, over the flows and tasks.

The top of the layers (docs/architecture.md): it imports ``flows`` and ``tasks``; nothing below imports it.
"""
