"""The global concurrency limit ``gpu``: two runs never share one accelerator.

Every piece of GPU-bound work (on the local profile: the trainer's loops) holds a slot of the Prefect global
concurrency limit ``gpu`` while it runs; the limit (1 slot by default: one accelerator) is created when missing.
Outside a Prefect run, or against a server that cannot be reached, the work runs without a slot — a library user
calling the tasks' functions directly is not made to run a server.

Every ``recipe run`` without ``PREFECT_API_URL`` starts a temporary server of its own, but all of them share one
database (``PREFECT_HOME``), and a temporary server keeps its slot leases in memory: a run killed with its server
leaves its slot taken with no lease to expire it. So each holder also leaves a record beside the database
(``gpu-slots/<pid>-<start time>``, removed when it frees the slot), and a new temporary server frees only the taken
slots no live holder accounts for: a pid whose start time still matches is alive, and its slot stays taken.

    ensure_gpu_limit()            # at the start of a pipeline run, or by `recipe serve`
    with gpu_slot("train-overfit"):
        run_loop()
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envs.files import atomic_write_text
from envs.scratch import owner_alive, owner_tag
from tasks.artifacts import in_prefect_run, log

GPU_LIMIT = "gpu"
DEFAULT_GPU_SLOTS = 1
SLOT_LEASE_S = 3600.0
"""A slot's lease, renewed while the work runs; a crashed holder frees its slot after this (on a temporary server,
which loses its leases with it, at the next run's ``ensure_gpu_limit``)."""


def ensure_gpu_limit(slots: int = DEFAULT_GPU_SLOTS) -> None:
    """Create the ``gpu`` global concurrency limit when it does not exist."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            limit = client.read_global_concurrency_limit_by_name(GPU_LIMIT)
        except ObjectNotFound:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=GPU_LIMIT, limit=slots))
            log("created the global concurrency limit %r with %d slot(s)", GPU_LIMIT, slots)
            return
        if limit.active_slots and _temporary_server():
            # A run killed with its server (SIGKILL, OOM) leaves its slot taken in the shared database with no lease
            # left to expire, and the resume would wait for it forever; another live run's slot is not leaked.
            live = live_holders()
            if limit.active_slots > live:
                update = GlobalConcurrencyLimitUpdate(active_slots=live)
                client.update_global_concurrency_limit(GPU_LIMIT, update)
                log("freed %d %r slot(s) a killed run left taken", limit.active_slots - live, GPU_LIMIT)


def _holders_dir() -> Path:
    from prefect.settings import get_current_settings

    return Path(get_current_settings().home) / "gpu-slots"


def live_holders() -> int:
    """Holders whose process still runs (the records of dead ones are removed)."""
    live = 0
    for record in _holders_dir().glob("*-*"):
        if owner_alive(record.name):
            live += 1
        else:
            record.unlink(missing_ok=True)
    return live


@contextmanager
def _holder_record(holder: str) -> Iterator[None]:
    folder = _holders_dir()
    record = folder / owner_tag()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record, holder + "\n")
    try:
        yield
    finally:
        record.unlink(missing_ok=True)


def _temporary_server() -> bool:
    """No ``PREFECT_API_URL``: the flows run against a temporary server started by this process."""
    from prefect.settings import get_current_settings

    return get_current_settings().api.url is None


@contextmanager
def gpu_slot(holder: str) -> Iterator[None]:
    """Hold one slot of ``gpu`` for the block (waits while another run holds it)."""
    if not in_prefect_run():
        yield
        return
    from prefect.concurrency.sync import concurrency

    log("%s: waiting for a %r slot", holder, GPU_LIMIT)
    with concurrency(GPU_LIMIT, occupy=1, lease_duration=SLOT_LEASE_S, strict=True), _holder_record(holder):
        log("%s: holds a %r slot", holder, GPU_LIMIT)
        held = time.monotonic()
        try:
            yield
        finally:  # logged while the slot is still held: the run's log shows each hold from its first line to this
            log("%s: frees its %r slot after %.1f s", holder, GPU_LIMIT, time.monotonic() - held)
