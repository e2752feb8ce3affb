"""Sending a run's finished stages to its trackers, without ever failing a stage (package docstring).

The state lives in ``<run>/tracking/state.json`` (written atomically): per backend the tracker run's id, its link, and
each stage's ending (attempt and finish time) it has taken. A stage is sent when its backend has not taken that
ending — so a stage run again (a retry) is sent again, a tracker that was down catches up at the next stage's end, and a
resumed pipeline continues the same tracker run. Each backend gets ``timeout_s`` per stage in a thread of its own; a
backend that raises or runs over is a warning, and its state is left as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from envs.errors import RecipeError
from evals.run_folder import found_here
from tasks.artifacts import log, warn
from tasks.explorer.queries import Explorer
from tasks.explorer.tokens import Decoder, load_decoder
from tasks.run_store import RunStore, StageManifest, StageStatus
from tasks.tracking.contract import Publication, Tracker, TrackerName, TrackerRun, TrackingSettings
from tasks.tracking.record import stage_publication
from tasks.tracking.state import BackendState, links, load_state, save_state, tracking_folder
from tasks.tracking.trackers import TRACKERS

LAST_STAGE = "transfer"


def tracker_run(store: RunStore) -> TrackerRun:
    info = store.info()
    commit = info.code_version.commit or "unknown"
    tags = {
        "run_id": info.run_id,
        "profile": info.profile,
        "config_hash": info.config_hash,
        "commit": commit + ("-dirty" if info.code_version.dirty else ""),
    }
    return TrackerRun(info.run_id, tracking_folder(store.root), tags, info.config)


def publish_run(store: RunStore, settings: TrackingSettings) -> dict[str, str]:
    """Send every ended stage a backend has not taken to each of ``settings.backends``; the links of those that hold
    the run. Never raises: a backend's failure is a warning."""
    if not settings.backends:
        return {}
    ended = _ended(store)
    state = load_state(store.root)
    publications: dict[str, Publication] = {}

    @cache
    def explorer() -> Explorer:  # made (and the base's tokenizer read) only when a stage is to be sent
        return Explorer(store, _decoder(store))

    def publication(manifest: StageManifest) -> Publication:
        if manifest.stage not in publications:
            folder = store.root / manifest.folder
            report = manifest.gate or {}
            publications[manifest.stage] = stage_publication(
                explorer(), manifest.stage, folder, report, settings.trajectories_per_stage
            )
        return publications[manifest.stage]

    outcome = _outcome(ended)
    for name in settings.backends:
        before = state.backends.get(name)
        pending = _pending(before, ended)
        if not pending and (outcome is None or (before is not None and before.finished)):
            continue
        work = _Send(TRACKERS[name](settings), tracker_run(store), before, pending, publication, outcome)
        after = _bounded(work, settings.timeout_s * (len(pending) + 1), f"tracker {name}")
        if after is not None:
            state.backends[name] = after
            save_state(store.root, state)
            log("tracker %s: took %s (%s)", name, ", ".join(m.stage for m in pending) or "the run's end", after.link)
    return links(store.root)


def ending(manifest: StageManifest) -> str:
    """Which ending of a stage this is: a stage run again (a retry, a resume) ends anew and is sent again."""
    return f"{manifest.attempt}@{manifest.finished_at or ''}"


def behind(store: RunStore, backends: tuple[TrackerName, ...]) -> list[TrackerName]:
    """Those of ``backends`` that have not taken every ended stage of the run."""
    taken, ended = load_state(store.root).backends, _ended(store)
    return [name for name in backends if _pending(taken.get(name), ended)]


def _ended(store: RunStore) -> list[StageManifest]:
    """The run's stages that have a gate report (passed or not)."""
    return [m for m in store.manifests() if m.gate is not None]


def _pending(taken: BackendState | None, ended: list[StageManifest]) -> list[StageManifest]:
    """The endings of ``ended`` a backend (``taken``: its state, None before its first) has not taken yet."""
    return [m for m in ended if taken is None or taken.published.get(m.stage) != ending(m)]


def _outcome(ended: list[StageManifest]) -> bool | None:
    """Whether the pipeline has ended here: False after a failed gate, True once the last stage passed; else None."""
    if any(m.status is StageStatus.GATE_FAILED for m in ended):
        return False
    return True if any(m.stage == LAST_STAGE and m.status is StageStatus.PASSED for m in ended) else None


class _Send:
    """One backend's share of ``publish_run`` (run in a thread of its own)."""

    def __init__(
        self,
        tracker: Tracker,
        run: TrackerRun,
        before: BackendState | None,
        pending: list[StageManifest],
        publication: Callable[[StageManifest], Publication],
        outcome: bool | None,
    ) -> None:
        self.tracker, self.run, self.before, self.pending = tracker, run, before, pending
        self.publication, self.outcome = publication, outcome

    def __call__(self) -> BackendState:
        tracker_id = self.tracker.start(self.run, self.before.tracker_id if self.before else None)
        state = BackendState(tracker_id=tracker_id, link=self.tracker.link())
        if self.before is not None:
            state.published = dict(self.before.published)
        try:
            for manifest in self.pending:
                self.tracker.publish(self.publication(manifest))
                state.published[manifest.stage] = ending(manifest)
            if self.outcome is not None:
                self.tracker.finish(self.outcome)
                state.finished = True
        finally:
            self.tracker.close()
        return state


def _bounded(work: Callable[[], BackendState], timeout_s: float, what: str) -> BackendState | None:
    """``work()`` in a daemon thread, given ``timeout_s``; None (and a warning) when it raised or ran over."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["state"] = work()
        except Exception as error:  # a tracker's trouble of any kind must not end the stage
            result["error"] = error

    thread = threading.Thread(target=run, name=what, daemon=True)
    thread.start()
    thread.join(timeout_s)
    advice = "the run folder stays the record; `recipe tracking publish RUN` sends what is missing"
    if thread.is_alive():
        warn("%s did not answer within %.0f s: the stage goes on without it (%s)", what, timeout_s, advice)
        return None
    if "error" in result:
        error = result["error"]
        warn("%s failed: %s: %s — the stage goes on (%s)", what, type(error).__name__, str(error)[:500], advice)
        return None
    return result["state"]


def _decoder(store: RunStore) -> Decoder | None:
    """The base's tokenizer (what de-risk prepared; found as a moved run's evals find it), to decode conversations;
    None when it is nowhere here: tables then show token ids."""
    derisk = store.manifest("1-derisk")
    policy = derisk.outputs.get("policy") if derisk else None
    if not isinstance(policy, str):
        return None
    try:
        where = found_here(policy, "the base", "--policy", store.root)
        return load_decoder(Path(where)) if where else None
    except (RecipeError, OSError, ValueError):
        return None
