"""A stub async-loop runtime (no model), shared by the async-loop tests: ``from tests.trainer.loops.stub_runtime
import StubRuntime`` (pytest runs as ``python -m pytest`` from the repository root, so ``tests`` imports as a
namespace package)."""

import asyncio
import random

from envs.types import Trajectory
from trainer.local import StepMetrics


class StubRuntime:
    """Groups of 4 rollouts whose rewards tie at every 3rd position (dropped; ``ties=False``: none tie); generation
    takes random short times (``generate_s``: exactly that long); the 'engine' version is the number of pushes, read
    when a group finishes (its newest possible weights would make staleness smaller, so the check is on the version at
    *start*, the worst case)."""

    def __init__(self, seed: int = 0, generate_s: float | None = None, ties: bool = True) -> None:
        self.version = 0
        self.version_offset = 0
        self.rng = random.Random(seed)
        self.generate_s = generate_s
        self.ties = ties
        self.trained_positions: list[int] = []
        self.generated: list[int] = []

    async def generate(self, position: int) -> list[Trajectory]:
        started_version = self.version
        self.generated.append(position)
        await asyncio.sleep(self.rng.uniform(0.0, 0.004) if self.generate_s is None else self.generate_s)
        rewards = [0.0] * 4 if self.ties and position % 3 == 2 else [0.0, 1.0, 1.0, 0.0]
        return [
            Trajectory(
                task_id=f"t{position}",
                group_id=f"p{position}",
                tokens=[1, 2, 3],
                loss_mask=[0, 1, 1],
                logprobs=[0.0, -1.0, -1.0],
                prompt_len=1,
                reward=r,
                passed=r == 1.0,
                weight_versions=[started_version],
            )
            for r in rewards
        ]

    async def train(self, trajectories: list[Trajectory]) -> StepMetrics:
        self.trained_positions.extend(sorted({int(t.group_id[1:]) for t in trajectories}))
        await asyncio.sleep(0.003)
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
        self.saved = (step, cursor)
        self.trained_at_checkpoint = list(self.trained_positions)
