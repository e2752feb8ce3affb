"""Package ``__init__`` modules that import their parts on first use (PEP 562), so a light part — a config model, an
enum — can be imported without loading the heavy ones beside it (torch, transformers): validating a profile must not
cost ten seconds of imports.

    # trainer/local/__init__.py
    __getattr__, __all__ = lazy_exports(__name__, {"trainer.local.batch": ["TrainBatch"], ...})

``from trainer.local import TrainBatch`` works as before; ``import trainer.local.config`` no longer loads the batch
code. Every exported name must exist in the module that lists it (``tests/test_architecture.py`` checks).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any], list[str]]:
    """A module ``__getattr__`` resolving each name of ``exports`` (module → names) from its module, and ``__all__``."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__, sorted(where)
