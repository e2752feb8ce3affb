"""A tiny generic decorator registry: ``name -> object``, used for advantage estimators, aggregations and losses.

Example::

    LOSSES: Registry[LossFn] = Registry("policy loss")

    @LOSSES.register("ppo_clip")
    def ppo_clip(...): ...

    LOSSES.get("ppo_clip")  # -> ppo_clip; an unknown name raises KeyError listing the known ones
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects of one kind; registration happens at import time through ``register``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that files the decorated object under ``name`` (a duplicate name is a programming error)."""

        def decorate(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[str(name)] = obj
            return obj

        return decorate

    def get(self, name: str) -> T:
        """The object filed under ``name``; ``KeyError`` naming the known entries when there is none."""
        try:
            return self._entries[str(name)]
        except KeyError:
            raise KeyError(f"unknown {self.kind} {str(name)!r}; known: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return str(name) in self._entries
