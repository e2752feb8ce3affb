"""Async-loop rules with a stub runtime (no model): admission by hand, refill of dropped groups, staleness bound,
cursor resume; and the weight-sync ordering of ``push_weights``."""

import asyncio
from collections import deque

import pytest

from envs.types import Trajectory
from tests.trainer.loops.stub_runtime import StubRuntime
from trainer.engine.weight_sync import push_weights
from trainer.loops.async_loop import (
    AsyncLoopConfig,
    AsyncStart,
    NoRewardSignal,
    StreamCursor,
    admission_capacity,
    no_signal_message,
    run_async,
    staleness,
)
from trainer.loops.history import LoopHistory
from trainer.loops.job import LoopHooks
from trainer.loops.rollouts import trainable
from trainer.loops.stream import task_at


@pytest.mark.parametrize(
    ("workers", "running", "s", "step", "b", "accepted", "expected"),
    [
        (8, 0, 1, 1, 4, 0, 8),  # min(8 − 0, (1+1)·4 − 0) = min(8, 8)
        (8, 3, 1, 1, 4, 2, 3),  # min(5, 8 − 5 = 3)
        (8, 2, 1, 1, 4, 6, 0),  # min(6, 8 − 8 = 0): the staleness bound closes admission
        (2, 2, 3, 5, 16, 0, 0),  # every worker busy
        (8, 0, 0, 3, 4, 8, 4),  # S = 0: step 3 may start exactly its own 4 groups: min(8, 12 − 8)
        (8, 0, 0, 3, 4, 12, 0),
    ],
)
def test_admission_capacity_by_hand(workers, running, s, step, b, accepted, expected):
    config = AsyncLoopConfig(workers=workers, max_staleness=s, prompts_per_step=b)
    assert admission_capacity(config, running, step, accepted) == expected


def test_staleness_uses_the_oldest_version_and_the_offset():
    t = Trajectory(task_id="t", group_id="g", weight_versions=[2, 3])
    assert staleness(5, t, version_offset=0) == 3  # 5 − 2
    assert staleness(5, t, version_offset=1) == 2  # resumed at step 1: engine version 2 is trainer step 3
    assert staleness(5, Trajectory(task_id="t", group_id="g"), 0) == 0


def _run(runtime: StubRuntime, config: AsyncLoopConfig, tmp_path, start=0, cursor=None) -> LoopHistory:
    history = LoopHistory(kind="async")
    return asyncio.run(run_async(runtime, config, AsyncStart(start, cursor or StreamCursor(), history), tmp_path))


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_staleness_stays_within_the_bound_and_dropped_groups_are_refilled(tmp_path, max_staleness):
    config = AsyncLoopConfig(prompts_per_step=4, steps=6, workers=6, max_staleness=max_staleness, checkpoint_every=0)
    runtime = StubRuntime()
    history = _run(runtime, config, tmp_path)
    assert [r.step for r in history.steps] == [1, 2, 3, 4, 5, 6]
    assert all(len(r.positions) == 4 for r in history.steps)  # every batch refilled to B groups
    trained = [p for r in history.steps for p in r.positions]
    assert not [p for p in trained if p % 3 == 2]  # zero-variance groups never reach the trainer
    assert sum(r.groups_dropped for r in history.steps) >= 6 * 4 // 2 - 1  # every 3rd group tied
    assert max(r.staleness_max for r in history.steps) <= max_staleness
    if max_staleness == 0:
        assert all(r.staleness_max == 0 for r in history.steps)


class AllTie(StubRuntime):
    """A policy that solves none of its tasks: every group's rewards tie."""

    async def generate(self, position: int) -> list[Trajectory]:
        group = await super().generate(position)
        return [t.model_copy(update={"reward": 0.0, "passed": False}) for t in group]


def test_a_policy_that_never_varies_ends_the_run_saying_so_instead_of_sampling_forever(tmp_path):
    config = AsyncLoopConfig(prompts_per_step=2, steps=3, workers=4, checkpoint_every=0, max_dropped_in_a_row=20)
    runtime, reported = AllTie(), []
    hooks = LoopHooks(on_rollouts=lambda step, trajectories: reported.extend(trajectories))
    start = AsyncStart(0, StreamCursor(), LoopHistory(kind="async"))
    with pytest.raises(NoRewardSignal, match=r"20 groups in a row had rewards that all tie \(the last: \[0.0\]\)"):
        asyncio.run(run_async(runtime, config, start, tmp_path, hooks))
    assert 20 <= len(runtime.generated) < 20 + config.workers  # it stopped at the bound, not after
    assert len(reported) >= 20 * 4  # the dropped groups' rollouts were still recorded


def test_groups_that_only_fail_end_the_run_naming_the_failure_not_the_policy():
    lost = Trajectory(task_id="t", group_id="g", error_class="retryable_infra", error="engine 127.0.0.1:18000 refused")
    message = no_signal_message(256, [lost] * 4, trainable([lost] * 4))
    assert message == (
        "256 groups in a row had no rollout to train on (the last group's first failure: retryable_infra: engine "
        "127.0.0.1:18000 refused): the engines or the environment fail, not the policy"
    )


def test_more_staleness_lets_generation_run_ahead(tmp_path):
    stale = [0, 2]
    spreads = []
    for s in stale:
        runtime = StubRuntime(seed=1)
        config = AsyncLoopConfig(prompts_per_step=4, steps=6, workers=8, max_staleness=s, checkpoint_every=0)
        history = _run(runtime, config, tmp_path)
        spreads.append(max(r.staleness_max for r in history.steps))
    assert spreads[0] == 0 and spreads[1] >= 1  # with S = 2, some groups were generated on older weights


def test_checkpoint_cursor_resumes_pending_positions_first(tmp_path):
    config = AsyncLoopConfig(prompts_per_step=4, steps=3, workers=8, max_staleness=2, checkpoint_every=3)
    runtime = StubRuntime()
    _run(runtime, config, tmp_path)
    step, saved = runtime.saved
    assert step == 3
    cursor = StreamCursor.from_json(saved)
    pending, trained = set(saved["pending"]), set(runtime.trained_at_checkpoint)
    # everything before `next` is accounted for: pending (started, not yet trained or dropped), trained, or a
    # tied group that was dropped; a pending position may itself be a tied group still generating
    assert pending <= set(runtime.generated) and not pending & trained
    assert set(range(saved["next"])) - pending - trained <= {p for p in range(saved["next"]) if p % 3 == 2}
    assert [cursor.take() for _ in range(len(saved["pending"]) + 1)] == [*saved["pending"], saved["next"]]


def test_cursor_rejects_a_foreign_value():
    with pytest.raises(ValueError, match="async-loop cursor"):
        StreamCursor.from_json(17)
    assert StreamCursor(5, deque([1, 3])).to_json({2}) == {"next": 5, "pending": [1, 2, 3]}


def test_task_stream_is_a_fresh_permutation_per_epoch_and_reproducible():
    first = [task_at(i, 5, seed=3) for i in range(10)]
    assert sorted(first[:5]) == sorted(first[5:]) == [0, 1, 2, 3, 4]
    assert first == [task_at(i, 5, seed=3) for i in range(10)]
    assert first != [task_at(i, 5, seed=4) for i in range(10)]


class RecordingSync:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.fail = fail

    async def pause(self) -> None:
        self.calls.append("pause")

    async def update_weights(self, source) -> int:
        self.calls.append("update")
        if self.fail:
            raise RuntimeError("load failed")
        return 7

    async def resume(self) -> None:
        self.calls.append("resume")


def test_push_weights_pauses_updates_then_resumes_even_on_failure():
    sync = RecordingSync()
    assert asyncio.run(push_weights(sync, object())) == 7
    assert sync.calls == ["pause", "update", "resume"]
    failing = RecordingSync(fail=True)
    with pytest.raises(RuntimeError, match="load failed"):
        asyncio.run(push_weights(failing, object()))
    assert failing.calls == ["pause", "update", "resume"]
