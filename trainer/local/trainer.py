"""``LocalTrainer``: one policy-gradient optimizer step per mini-batch, in pure torch, on the local policy.

    config = TrainerConfig(lr=1e-5, lr_schedule="cosine", warmup_steps=2, total_steps=100)
    trainer = LocalTrainer(model, config)
    metrics = trainer.train_step(TrainBatch.from_trajectories(trajectories, config.algorithm))
    engine.update_weights(trainer.state_dict_for_engine())

One step (shared/RECIPE.md): the batch is split into micro-batches of at most ``token_budget`` computed tokens;
each one is forwarded (``token_stats``, packed by default), scored with ``policy_loss`` using the mini-batch's
precomputed token weights (a masked SUM Σ w·ℓ, so accumulating gradients over any split equals one pass over the
whole mini-batch) and back-propagated. Then the gradient is clipped to ``grad_clip`` (global L2 norm), AdamW steps,
and the learning-rate schedule advances. One optimizer step per batch makes π_old = π, so the loss is given
π_old = sg(π) (what PPO clip needs; the rollout-ratio losses use μ and ignore it). With ``config.retention`` set, the
step's retention examples add γ · their next-token loss before the clip (PPO-ptx, ``trainer.local.retention``).

Schedules (multiplier of ``lr`` at optimizer step k = 0, 1, …): a linear warm-up (k + 1)/W for k < W, then
constant 1, or cosine m + (1 − m)·(1 + cos(π·p))/2 with p = (k − W)/(total − W) clipped to [0, 1] and m the floor
``min_lr_ratio``.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict
from torch import Tensor
from torch.optim.lr_scheduler import LambdaLR
from transformers import PreTrainedModel

from trainer.algorithms import MechanismActivity, policy_loss
from trainer.algorithms.registry import Registry
from trainer.local.batch import BatchStats, TrainBatch
from trainer.local.config import LRSchedule, TrainerConfig
from trainer.local.logprobs import token_stats
from trainer.local.retention import RetentionLoss

ScheduleFn = Callable[[int, TrainerConfig], float]
LR_SCHEDULES: Registry[ScheduleFn] = Registry("learning-rate schedule")


@LR_SCHEDULES.register(LRSchedule.CONSTANT)
def constant_schedule(step: int, config: TrainerConfig) -> float:
    """1 after warm-up."""
    return 1.0


@LR_SCHEDULES.register(LRSchedule.COSINE)
def cosine_schedule(step: int, config: TrainerConfig) -> float:
    """m + (1 − m)·(1 + cos(π·p))/2, p = (k − W)/(total − W) clipped to [0, 1]."""
    assert config.total_steps is not None  # the config validator guarantees it for cosine
    progress = min(max((step - config.warmup_steps) / (config.total_steps - config.warmup_steps), 0.0), 1.0)
    return config.min_lr_ratio + (1 - config.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def lr_multiplier(step: int, config: TrainerConfig) -> float:
    """The learning-rate multiplier at optimizer step ``step`` (0-based): warm-up, then the configured shape."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    return LR_SCHEDULES.get(config.lr_schedule)(step, config)


class StepMetrics(BaseModel):
    """What one optimizer step measured. Token shares and |Δ logprob| are over loss-masked tokens."""

    model_config = ConfigDict(frozen=True)

    step: int
    """Optimizer steps done, this one included."""
    lr: float
    loss: float
    """Σ over micro-batches of Σ w·ℓ (the mini-batch loss)."""
    grad_norm: float
    """Global gradient L2 norm before clipping."""
    entropy: float
    """Mean policy entropy (nats) over loss tokens."""
    token_shares: dict[str, float]
    """Share of loss tokens under each policy-loss flag (dppo_masked, ppo_clipped, glm5_masked, tis_capped…)."""
    logprob_abs_diff_mean: float
    """Mean |log π − log μ| (train vs rollout); the recipe's health check wants < 0.03."""
    logprob_abs_diff_max: float
    retention_nll: float | None = None
    """Mean next-token loss (nats) on the step's retention examples; None without retention."""
    activity: MechanismActivity = MechanismActivity()
    """The switchable mechanisms' activity this step (nudges, DPPO mask and |π/μ − 1|, overlong filter, length
    penalty, aggregation vs token_mean); see ``trainer.algorithms.activity``."""
    reward_mean: float
    """Mean raw reward over every trajectory handed in."""
    trajectories: int
    """Trajectories trained on (after the zero-variance filter)."""
    groups_dropped: int
    tokens: int
    loss_tokens: int
    micro_batches: int
    tokens_per_s: float
    """Real (unpadded) tokens over the whole step's wall time."""
    forward_s: float
    backward_s: float
    optimizer_s: float
    retention_s: float = 0.0
    """Forward and backward of the retention examples."""
    step_s: float

    def flat(self) -> dict[str, float]:
        """One level of ``name -> number`` for logging; token shares become ``share/<flag>``."""
        values = self.model_dump(exclude={"token_shares", "activity"}, exclude_none=True)
        return (
            {name: float(value) for name, value in values.items()}
            | {f"share/{flag}": share for flag, share in self.token_shares.items()}
            | {f"activity/{name}": float(value) for name, value in self.activity.model_dump().items()}
        )


def _elapsed(tick: float, device: torch.device) -> float:
    """Seconds since ``tick`` once the device's queued kernels finished (CUDA runs asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - tick


def _activity(stats: BatchStats, ratio_abs_dev: float, dppo_masked: float) -> MechanismActivity:
    """The step's mechanism activity: what the batch's shaping and filters did, the loss's DPPO mask and |π/μ − 1|."""
    return MechanismActivity(
        nudges_inserted=stats.nudges_inserted,
        dppo_masked_share=dppo_masked,
        ratio_abs_dev_mean=ratio_abs_dev,
        overlong_dropped_share=stats.overlong_dropped_share,
        length_penalty_mean=stats.length_penalty_mean,
        weights_vs_token_mean=stats.weights_vs_token_mean,
    )


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's global RNG and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class LocalTrainer:
    """AdamW policy-gradient trainer over ``TrainBatch``es for a transformers causal LM (see the module docstring)."""

    def __init__(self, model: PreTrainedModel, config: TrainerConfig) -> None:
        seed_everything(config.seed)
        self.model = model
        self.config = config
        self.step = 0
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ValueError("the model has no trainable parameters (every requires_grad is False)")
        self.optimizer = torch.optim.AdamW(
            self.parameters, lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
        )
        self.scheduler = LambdaLR(self.optimizer, partial(lr_multiplier, config=config))
        self.retention = RetentionLoss(config.retention, config.seed) if config.retention else None

    def train_step(self, batch: TrainBatch) -> StepMetrics:
        """Forward/backward every micro-batch, clip, AdamW step, advance the schedule; gradients stay in ``.grad``."""
        vocab = self.model.get_input_embeddings().num_embeddings
        if int(batch.tokens_BT.max()) >= vocab or int(batch.tokens_BT.min()) < 0:
            raise ValueError(f"batch has token ids outside the model's vocabulary [0, {vocab})")
        device = next(self.model.parameters()).device
        started = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        timings = defaultdict(float)
        sums = defaultdict(float)
        max_abs_diff = 0.0
        micro_batches = batch.micro_batches(self.config.token_budget, self.config.layout)
        for micro in micro_batches:
            tick = time.perf_counter()
            tokens_SL, lengths_S = micro.take(batch.tokens_BT).to(device), batch.lengths_B[micro.rows_S].to(device)
            mask_SL = micro.take(batch.loss_mask_BT).to(device)
            stats = token_stats(self.model, tokens_SL, lengths_S, self.config.layout, score_SL=mask_SL)
            rollout_SL = micro.take(batch.rollout_logprobs_BT).to(device)
            loss, loss_metrics = policy_loss(
                stats.logprobs_SL,
                rollout_SL,
                micro.take(batch.advantages_BT).to(device),
                mask_SL,
                micro.take(batch.weights_BT).to(device),
                self.config.algorithm,
                old_logprobs_BT=stats.logprobs_SL.detach(),
            )
            timings["forward_s"] += _elapsed(tick, device)
            tick = time.perf_counter()
            loss.backward()
            timings["backward_s"] += _elapsed(tick, device)

            loss_tokens = loss_metrics.pop("loss_tokens")
            sums["loss"] += float(loss.detach())
            sums["loss_tokens"] += loss_tokens
            sums["entropy"] += float((stats.entropy_SL * mask_SL).sum())
            for name, value in loss_metrics.items():
                sums[name] += value * loss_tokens
            if loss_tokens:
                abs_diff_SL = (stats.logprobs_SL.detach() - rollout_SL).abs()
                max_abs_diff = max(max_abs_diff, float(abs_diff_SL[mask_SL.bool()].max()))

        retention_nll = self._retention_backward(timings, device)
        tick = time.perf_counter()
        lr = self.scheduler.get_last_lr()[0]
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        timings["optimizer_s"] += _elapsed(tick, device)
        step_s = time.perf_counter() - started

        loss_tokens = int(sums.pop("loss_tokens"))
        per_token = {name: value / max(loss_tokens, 1) for name, value in sums.items() if name != "loss"}
        activity = _activity(batch.stats, per_token.pop("ratio_abs_dev"), per_token.get("dppo_masked", 0.0))
        return StepMetrics(
            step=self.step,
            lr=lr,
            loss=sums["loss"],
            grad_norm=float(grad_norm),
            entropy=per_token.pop("entropy"),
            logprob_abs_diff_mean=per_token.pop("logprob_abs_diff"),
            logprob_abs_diff_max=max_abs_diff,
            token_shares=per_token,
            activity=activity,
            retention_nll=retention_nll,
            reward_mean=batch.stats.reward_mean,
            trajectories=batch.tokens_BT.shape[0],
            groups_dropped=batch.stats.groups_dropped,
            tokens=batch.num_tokens,
            loss_tokens=loss_tokens,
            micro_batches=len(micro_batches),
            tokens_per_s=batch.num_tokens / step_s,
            step_s=step_s,
            **timings,
        )

    def _retention_backward(self, timings: dict[str, float], device: torch.device) -> float | None:
        """Add the retention term's gradient (PPO-ptx) when configured; its loss, or None."""
        if self.retention is None:
            return None
        tick = time.perf_counter()
        nll = self.retention.backward(self.model, self.step, self.config.token_budget)
        timings["retention_s"] += _elapsed(tick, device)
        return nll

    def state_dict_for_engine(self) -> dict[str, Tensor]:
        """A detached copy of the weights for ``Engine.update_weights`` (tied lm_head left out, as on disk).

        A copy, not references: the engine may still be loading while the trainer's next step updates in place.
        """
        tied = {"lm_head.weight"} if self.model.config.tie_word_embeddings else set()
        return {name: tensor.detach().clone() for name, tensor in self.model.state_dict().items() if name not in tied}
