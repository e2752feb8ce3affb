"""The local trainer's config: ``TrainerConfig`` (optimizer, schedule, micro-batching, the algorithm) and the layout
of a micro-batch. Pydantic only — a profile is validated without importing torch."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer.algorithms.config import AlgorithmConfig


class Layout(StrEnum):
    PACKED = "packed"
    PADDED = "padded"
    SHARED_PREFIX = "shared_prefix"


class LRSchedule(StrEnum):
    CONSTANT = "constant"
    COSINE = "cosine"


class RetentionConfig(BaseModel):
    """PPO-ptx retention (``trainer.local.retention``): γ times the next-token loss on a few of the base's own
    imitation examples, added to every optimizer step's loss."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    path: str = Field(min_length=1)
    """The retention file (JSON lines of tokenized examples, ``trainer.retention``)."""
    coef: float = Field(gt=0)
    """γ, the weight of the examples' mean next-token loss next to the RL loss."""
    examples_per_step: int = Field(16, ge=1)
    """Examples drawn for each optimizer step."""


class TrainerConfig(BaseModel):
    """Optimizer, schedule and micro-batching of the local trainer; defaults follow the recipe's hero run."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True, allow_inf_nan=False)

    # --- core ---------------------------------------------------------------------------------------------------
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Advantages, aggregation, policy loss and filters."""
    lr: float = Field(default=1e-6, gt=0)
    """Peak AdamW learning rate."""
    lr_schedule: LRSchedule = LRSchedule.CONSTANT
    """Shape after warm-up: constant or cosine decay to ``min_lr_ratio · lr`` at ``total_steps``."""
    warmup_steps: int = Field(default=0, ge=0)
    """Linear warm-up steps W (multiplier (k + 1)/W)."""
    total_steps: int | None = Field(default=None, gt=0)
    """Optimizer steps of the whole run; required by the cosine schedule."""
    token_budget: int = Field(default=4096, gt=0)
    """Most tokens one forward computes (shared_prefix: each shared prefix once plus the rest; packed: Σ len; padded:
    rows × longest)."""
    seed: int = Field(default=0, ge=0, lt=2**63)
    """Seeds python, numpy and torch RNGs when the trainer is built."""
    retention: RetentionConfig | None = None
    """PPO-ptx: keep what the base could do by also training on its own examples (None: RL alone, the recipe's)."""

    # --- advanced -----------------------------------------------------------------------------------------------
    betas: tuple[float, float] = (0.9, 0.98)
    """AdamW (β1, β2)."""
    weight_decay: float = Field(default=0.01, ge=0)
    """AdamW decoupled weight decay (applied to every parameter)."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Clip the global gradient L2 norm to this."""
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """Cosine floor m as a fraction of ``lr``."""
    layout: Layout = Layout.SHARED_PREFIX
    """Micro-batch layout: one packed row in which a group's shared prompt is computed once (``shared_prefix``),
    packed sequences (no padding compute) or padded rows."""

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= beta < 1 for beta in betas):
            raise ValueError(f"betas must each lie in [0, 1), got {betas}")
        return betas

    @model_validator(mode="after")
    def _schedule_is_complete(self) -> Self:
        if self.lr_schedule == LRSchedule.COSINE and (
            self.total_steps is None or self.total_steps <= self.warmup_steps
        ):
            raise ValueError(
                f"lr_schedule 'cosine' needs total_steps > warmup_steps ({self.warmup_steps}), got {self.total_steps}"
            )
        return self
