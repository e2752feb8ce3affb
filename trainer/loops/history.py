"""What a loop run has done so far: one ``StepRecord`` per optimizer step in a ``LoopHistory`` (saved atomically to
``<out_dir>/history.json`` after each step, truncated to the checkpoint on a resume), timed by a ``WallClock`` that
continues across resumes and leaves evaluation out."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envs.errors import RecipeError
from envs.files import atomic_write_text
from trainer.algorithms.activity import MechanismActivity

HISTORY_FILE = "history.json"


class StepRecord(BaseModel):
    """One loop step. Rewards are over the rollouts the step generated (sync), or those that finished since the
    previous step (async; the step's trained rollouts when none did)."""

    model_config = ConfigDict(extra="forbid")

    step: int
    wall_s: float
    """Seconds since the loop started (evaluation time excluded), cumulative over resumes."""
    reward_mean: float
    pass_rate: float
    trajectories: int
    groups_dropped: int
    """Groups without signal (all rewards tie), dropped."""
    trained: bool
    groups_stale: int = 0
    """Async: groups dropped at the trainer because their staleness would exceed the bound S."""
    generate_s: float = 0.0
    train_s: float = 0.0
    sync_s: float = 0.0
    wait_s: float = 0.0
    """Async: trainer idle time waiting for the generation buffer (wait_for_generation_buffer)."""
    staleness_mean: float = 0.0
    staleness_max: int = 0
    tokens_per_s: float = 0.0
    """Generated (loss-masked) tokens per wall second over this step."""
    loss: float | None = None
    logprob_abs_diff_mean: float | None = None
    positions: list[int] = Field(default_factory=list)
    """Stream positions of the groups this step used (the cursor trail)."""
    retention_nll: float | None = None
    """Mean next-token loss on the step's retention examples (PPO-ptx, ``trainer.local.retention``); None without."""
    eval_reward: float | None = None
    eval_pass_rate: float | None = None
    activity: MechanismActivity | None = None
    """What the switchable mechanisms did in the step's optimizer step (``trainer.algorithms.activity``); None when
    the step trained nothing, and in histories written before it was recorded."""


class ResumeError(RecipeError):
    """A run folder whose resume state is damaged; the message names the file."""


class LoopHistory(BaseModel):
    """Every step so far, written atomically to ``<out_dir>/history.json`` after each step."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    steps: list[StepRecord] = Field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return self.steps[-1].wall_s if self.steps else 0.0

    def activity(self) -> MechanismActivity | None:
        """The run's mechanism activity over the steps that recorded one (``MechanismActivity.over_steps``)."""
        return MechanismActivity.over_steps([r.activity for r in self.steps if r.activity is not None])

    def save(self, out_dir: Path) -> None:
        atomic_write_text(out_dir / HISTORY_FILE, self.model_dump_json(indent=1))  # fsynced, then renamed

    @classmethod
    def resume(cls, out_dir: Path, kind: str, step: int) -> LoopHistory:
        """The saved history up to ``step`` (a checkpoint's step), or a fresh one; ``ResumeError`` naming the file
        when it is damaged."""
        path = out_dir / HISTORY_FILE
        if step == 0 or not path.is_file():
            return cls(kind=kind)
        try:
            saved = cls.model_validate_json(path.read_bytes())
        except (ValidationError, OSError) as error:
            reason = str(error).splitlines()[0][:200]
            raise ResumeError(
                f"the step history {path} is damaged ({reason}); move it aside to resume without the records of the "
                "earlier steps"
            ) from None
        if saved.kind != kind:
            raise ValueError(f"{out_dir} holds a {saved.kind!r} loop run, not a {kind!r} one")
        return cls(kind=kind, steps=[r for r in saved.steps if r.step <= step])


class WallClock:
    """A loop's ``wall_s``: it starts where the resumed history left off, and evaluation is not loop time."""

    def __init__(self, start_s: float) -> None:
        self._origin = time.perf_counter() - start_s

    def now(self) -> float:
        return time.perf_counter() - self._origin

    @contextmanager
    def stopped(self) -> Iterator[None]:
        """Time spent inside does not count."""
        tick = time.perf_counter()
        try:
            yield
        finally:
            self._origin += time.perf_counter() - tick
