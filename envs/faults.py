"""Fault injection: deliberate infra failures at the real boundaries, so the recovery code that handles them runs.

A ``FaultPlan`` (the profile's ``faults:`` section) says how often (``rate``: the chance that one call at an injection
site fails), which ``FaultKind``s, and from which ``seed``. Off (rate 0 or no kinds) means no injector exists at all:
callers hold ``FaultInjector | None`` and wrap nothing when it is None, so a run without faults pays nothing.

Where each kind is injected, and what must survive it:

==================  ===========================================  ===============================================
kind                injected in                                  handled by
==================  ===========================================  ===============================================
tool_hang           the gateway process (``envs.mcp.servers``)   the client's call timeout / harness tool timeout
tool_crash          the gateway process: ``os._exit``            transport error → retryable_infra; the pool's
                                                                 health check replaces the sandbox
tool_garbage        the gateway process                          the model reads it (an outcome of the episode)
tool_empty          the gateway process                          recorded as ``returned_empty``
sandbox_start       ``CopyProvider.copy_world``                  the pool's start retries, else retryable_infra
engine_drop/_500    ``EngineCompletions.complete`` (in-process)  ``EngineError(retryable)`` → retryable_infra
                    ``FaultTransport`` under ``CompletionsClient``
                    (HTTP: the TITO stage)
engine_stall        the same two                                 bounded by ``timeout_s`` → retryable_infra
judge_429/_500/     ``FaultTransport`` under ``ApiClient``       the judge's retry with backoff / Retry-After
_slow/_malformed
worker_crash        the async loop's generation worker; the      the worker is replaced, its position re-queued;
                    sync loop's generation of one group          the sync loop generates the group again
==================  ===========================================  ===============================================

A rollout an engine, tool-transport or sandbox fault ended is ``retryable_infra``: never graded, re-run by the
training loops (``trainer.loops.rollouts.Rollouts``, ``infra_retries``) and the eval runner, and when it still fails,
recorded with its class and trained on by no one.

Every injector appends one JSON line per fault to the plan's ``log`` (when set; gateways are other processes, so the
file is the one tally), and the recovery code adds one per retry it made (``FaultPlan.note_retry``: a sandbox start
tried again, a crashed gateway replaced, a dead worker's group re-queued, an infra-failed rollout re-run, a judge
request re-sent):
``read_fault_log`` counts both by kind.

    injector = FaultPlan(rate=0.1, kinds=(FaultKind.ENGINE_500,)).injector("engine")
    if injector is not None and injector.fires(FaultKind.ENGINE_500):
        raise EngineError("injected HTTP 500", retryable=True)
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class FaultKind(StrEnum):
    TOOL_HANG = "tool_hang"
    TOOL_CRASH = "tool_crash"
    TOOL_GARBAGE = "tool_garbage"
    TOOL_EMPTY = "tool_empty"
    SANDBOX_START = "sandbox_start"
    ENGINE_DROP = "engine_drop"
    ENGINE_500 = "engine_500"
    ENGINE_STALL = "engine_stall"
    JUDGE_429 = "judge_429"
    JUDGE_500 = "judge_500"
    JUDGE_SLOW = "judge_slow"
    JUDGE_MALFORMED = "judge_malformed"
    WORKER_CRASH = "worker_crash"


INJECTED, RETRIED = "injected", "retried"
TOOL_FAULTS = (FaultKind.TOOL_HANG, FaultKind.TOOL_CRASH, FaultKind.TOOL_GARBAGE, FaultKind.TOOL_EMPTY)
ENGINE_FAULTS = (FaultKind.ENGINE_DROP, FaultKind.ENGINE_500, FaultKind.ENGINE_STALL)
JUDGE_FAULTS = (FaultKind.JUDGE_429, FaultKind.JUDGE_500, FaultKind.JUDGE_SLOW, FaultKind.JUDGE_MALFORMED)


class FaultPlan(BaseModel):
    """What to inject: each call at a site fails with chance ``rate``, as one of ``kinds`` that site can produce."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    rate: float = Field(0.0, ge=0.0, le=1.0)
    """Chance that one call at an injection site fails (0: off)."""
    kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    seed: int = Field(0, ge=0, lt=2**63)
    stall_s: float = Field(600.0, gt=0.0)
    """How long a hang or stall lasts: longer than the timeout that is to catch it (the tool call's, ``timeout_s``)."""
    timeout_s: float = Field(30.0, gt=0.0)
    """The bound put on an in-process engine call while faults are on: past it, a retryable engine error."""
    log: Path | None = None
    """JSONL file every injector appends its faults to (set per stage by the pipeline)."""

    @property
    def enabled(self) -> bool:
        return self.rate > 0.0 and bool(self.kinds)

    def injector(self, site: str) -> FaultInjector | None:
        """The injector of one site (its random stream is seeded by ``seed`` and ``site``), or None when off."""
        return FaultInjector(self, site) if self.enabled else None

    def note(self, event: str, kind: str, site: str) -> None:
        """Append one event line to ``log`` (nothing without one): one short O_APPEND write, safe across processes."""
        if self.log is None:
            return
        line = json.dumps({"event": event, "kind": kind, "site": site, "t": round(time.time(), 3)}) + "\n"
        with self.log.open("a", encoding="utf-8") as log:
            log.write(line)

    def note_retry(self, what: str, site: str) -> None:
        """Record that recovery code retried (``what``: e.g. ``sandbox_start``, ``worker_crash``, ``rate_limited``)."""
        self.note(RETRIED, what, site)


class FaultInjector:
    """Seeded, thread-safe decisions for one site; counts what it injected by kind."""

    def __init__(self, plan: FaultPlan, site: str) -> None:
        self.plan, self.site = plan, site
        self._rng = random.Random(f"{plan.seed}:{site}")
        self._lock = threading.Lock()
        self.injected: Counter[FaultKind] = Counter()

    def pick(self, candidates: Sequence[FaultKind]) -> FaultKind | None:
        """One draw: with chance ``rate`` one of ``candidates`` the plan enables (chosen uniformly), else None."""
        enabled = [kind for kind in candidates if kind in self.plan.kinds]
        if not enabled:
            return None
        with self._lock:
            if self._rng.random() >= self.plan.rate:
                return None
            kind = self._rng.choice(enabled)
            self.injected[kind] += 1
        self.plan.note(INJECTED, kind, self.site)
        return kind

    def fires(self, kind: FaultKind) -> bool:
        return self.pick((kind,)) is kind

    def report(self) -> dict[str, int]:
        with self._lock:
            return {str(kind): n for kind, n in sorted(self.injected.items())}


class InjectedFault(RuntimeError):
    """A failure the fault injector made up (worker crash): never a bug of the code that raised it."""


def read_fault_log(path: Path) -> dict[str, dict[str, int]]:
    """``{"injected": {kind: n}, "retried": {what: n}}`` from a plan's JSONL log (empty counts when none exists)."""
    counts: dict[str, Counter[str]] = {INJECTED: Counter(), RETRIED: Counter()}
    lines: Iterable[str] = path.read_text(encoding="utf-8").splitlines() if path.exists() else ()
    for line in lines:
        if line.strip():
            entry = json.loads(line)
            counts[entry["event"]][entry["kind"]] += 1
    return {event: dict(sorted(counter.items())) for event, counter in counts.items()}
