"""Bundled Harbor tasks for the terminal harness (``envs.harness.terminal.bundled_terminal_tasks``), in the form
Harbor itself runs.

Each sub-folder is one task: ``instruction.md``, ``task.toml``, ``environment/Dockerfile`` (``WORKDIR /app`` and
``COPY`` of the task's input files, which sit beside it), ``tests/test.sh`` (the verifier: reads ``/app``, writes
reward 1 or 0 to ``/logs/verifier/reward.txt`` or ``reward.json``) and ``solution/solve.sh`` (works in ``/app``).
"""
