"""The loops' kinds, as a profile names them (no loop code loaded): which loop, and where the fully-async one runs."""

from __future__ import annotations

from enum import StrEnum


class LoopKind(StrEnum):
    SYNC = "sync"
    """Generate a batch with the current weights, train on it, push (``trainer.loops.sync``)."""
    ASYNC = "async"
    """Generation never waits for training, within a staleness bound (``trainer.loops.async_loop``)."""


class RuntimeKind(StrEnum):
    ASYNCIO = "asyncio"
    """Engine, harness and trainer in this process (the trainer in a worker thread)."""
    SUBPROCESS = "subprocess"
    """Engine and harness in this process, the trainer in a child process (no shared interpreter lock)."""
    RAY = "ray"
    """Engine (with the harness) and trainer as two Ray actors."""
