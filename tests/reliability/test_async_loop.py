"""The async loop survives a step with no group finished since the previous one (its batch was already buffered)."""

import asyncio

from tests.trainer.loops.stub_runtime import StubRuntime
from trainer.loops.async_loop import AsyncLoopConfig, AsyncStart, StreamCursor, run_async
from trainer.loops.history import LoopHistory


def test_a_step_with_nothing_finished_since_the_last_one_still_records_its_metrics(tmp_path):
    # 50 ms per group, 3 ms of training: with B = 2, K = 4 and S = 1 the first four groups land together, so step 2
    # trains on groups buffered before step 1 ended and nothing finishes in between
    runtime = StubRuntime(generate_s=0.05, ties=False)
    config = AsyncLoopConfig(prompts_per_step=2, workers=4, max_staleness=1, steps=4, checkpoint_every=0)
    history = LoopHistory(kind="async")
    asyncio.run(run_async(runtime, config, AsyncStart(0, StreamCursor(), history), tmp_path))
    assert [r.step for r in history.steps] == [1, 2, 3, 4]
    # step 2 trains groups 2 and 3, which finished before step 1 ended: its rewards are theirs
    assert history.steps[1].positions == [2, 3]
    assert history.steps[1].tokens_per_s == 0.0  # no token was generated during step 2
    assert all(r.reward_mean == 0.5 and r.pass_rate == 0.5 for r in history.steps)
