"""The async loop survives a step with no group finished since the previous one (its batch was already buffered)."""

import asyncio

from envs.types import Trajectory
from trainer.local import StepMetrics
from trainer.loops.async_loop import AsyncLoopConfig, StreamCursor, run_async
from trainer.loops.common import LoopHistory


class SlowGenerationRuntime:
    """50 ms per group, instant training: with B = 2, K = 4 and S = 1 the first four groups land together, so step 2
    trains on groups buffered before step 1 ended and nothing finishes in between."""

    def __init__(self) -> None:
        self.version = 0
        self.version_offset = 0

    async def generate(self, position: int) -> list[Trajectory]:
        started = self.version
        await asyncio.sleep(0.05)
        return [
            Trajectory(
                task_id=f"t{position}",
                group_id=f"p{position}",
                tokens=[1, 2, 3],
                loss_mask=[0, 1, 1],
                logprobs=[0.0, -1.0, -1.0],
                prompt_len=1,
                reward=reward,
                passed=reward == 1.0,
                weight_versions=[started],
            )
            for reward in (0.0, 1.0)
        ]

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        zero = dict.fromkeys(["loss", "grad_norm", "entropy", "logprob_abs_diff_mean", "logprob_abs_diff_max"], 0.0)
        timings = dict.fromkeys(["tokens_per_s", "forward_s", "backward_s", "optimizer_s", "step_s"], 0.0)
        return StepMetrics(
            step=0, lr=0.0, token_shares={}, reward_mean=0.5, trajectories=len(trajectories), groups_dropped=0,
            tokens=0, loss_tokens=0, micro_batches=1, **zero, **timings,
        )  # fmt: skip

    async def push(self) -> int:
        self.version += 1
        return self.version

    async def evaluate(self) -> tuple[float, float]:
        return 0.0, 0.0

    async def checkpoint(self, step: int, cursor: dict) -> None:
        pass


def test_a_step_with_nothing_finished_since_the_last_one_still_records_its_metrics(tmp_path):
    config = AsyncLoopConfig(prompts_per_step=2, workers=4, max_staleness=1, steps=4, checkpoint_every=0)
    history = LoopHistory(kind="async")
    asyncio.run(run_async(SlowGenerationRuntime(), config, 0, StreamCursor(), history, tmp_path))
    assert [r.step for r in history.steps] == [1, 2, 3, 4]
    # step 2 trains groups 2 and 3, which finished with 0 and 1 before step 1 ended: its rewards are theirs
    assert history.steps[1].positions == [2, 3]
    assert history.steps[1].tokens_per_s == 0.0  # no token was generated during step 2
    assert all(r.reward_mean == 0.5 and r.pass_rate == 0.5 for r in history.steps)
