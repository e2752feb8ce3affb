"""Bundled Harbor-format tasks for the terminal harness (``envs.harness.terminal.bundled_terminal_tasks``).

Each sub-folder is one task: ``instruction.md``, ``task.toml``, ``environment/`` (the input files), ``tests/test.sh``
(the verifier, writing reward 1 or 0 to ``${LOGS_DIR:-/logs/verifier}``) and ``solution/solve.sh``.
"""
