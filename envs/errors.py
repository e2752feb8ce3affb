"""The one base class of errors a user fixes (a flag, a config, a file) rather than a bug or a crash to debug.

``cli.main.main`` catches ``RecipeError``: it prints ``recipe: error: <message>`` on one line and exits 2, with no
traceback, so the message must say what is wrong and how to fix it. It lives in ``envs`` because ``envs`` imports
nothing of ours: every package (``envs``, ``trainer``, ``evals``, ``flows``) can raise a subclass of it.

Example::

    class EvalConfigError(RecipeError, ValueError): ...

    raise EvalConfigError("the engine at http://127.0.0.1:8000 serves ['policy']; pass --model policy")
"""

from __future__ import annotations


class RecipeError(Exception):
    """A user-fixable error; its message is printed alone, so it names the cause and the fix."""
