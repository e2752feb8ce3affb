"""Supervised fine-tuning on assistant tokens only: the bootstrap's next-token loss, AdamW, warmup + cosine schedule.

Loss of a batch of B token sequences, targets y_{i,t+1} predicted from the prefix x_{i,≤t}:

    L = Σ_{i,t} m_{i,t+1} · (−log p_θ(y_{i,t+1} | x_{i,≤t})) / Σ_{i,t} m_{i,t+1}

with m the loss mask (1 on assistant tokens — the ones the policy samples at rollout time — 0 on the prompt and
tool observations). Deterministic: the batch order is a seeded permutation per epoch.

A batch goes through the model as one packed row (``pack``): the sequences back to back, each attending only to its
own tokens, so no compute is spent on padding (the local bootstrap's examples run from 68 to 424 tokens: right-padding
a batch to its longest made 31 % of the computed positions padding), and prefixes that examples share — a harness's
system prompt and tool listing, a task's prompt — stored and computed once (``trainer.local.prefix_sharing``): a
local bootstrap batch then computes about half its tokens (``benchmarks/sft_packing.py``). The loss is the same sum
over the same targets.

    result = train_sft(model, examples, SftConfig(steps=600, batch_size=64, lr=3e-3))
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor
from transformers import PreTrainedModel

from trainer.local.packed_attention import packed_row_attention
from trainer.local.prefix_sharing import SHARED_PREFIX_SDPA, SharedPrefixPlan
from trainer.traces import TokenizedTrace


class SftConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(600, ge=1)
    batch_size: int = Field(64, ge=1)
    lr: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(20, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="cosine decays to lr · min_lr_ratio")
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = Field(1.0, gt=0)
    seed: int = 0
    max_wall_seconds: float | None = Field(None, gt=0, description="stop early (recorded) past this wall time")
    log_every: int = Field(50, ge=1)


@dataclass
class SftResult:
    steps_done: int
    losses: list[float] = field(default_factory=list)  # mean loss of each logged window, one per log_every steps
    final_loss: float = math.nan  # mean loss over the last log window
    seconds: float = 0.0
    stopped_early: bool = False


def learning_rate(step: int, config: SftConfig) -> float:
    """lr_t = lr · min(1, (t+1)/warmup) · (r + (1 − r) · ½(1 + cos(π t / T))), r = min_lr_ratio, T = steps."""
    warm = min(1.0, (step + 1) / config.warmup_steps) if config.warmup_steps else 1.0
    cosine = 0.5 * (1.0 + math.cos(math.pi * step / config.steps))
    return config.lr * warm * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)


def batch_order(n_examples: int, batch_size: int, seed: int) -> Iterator[list[int]]:
    """Endless batches of example indices: a seeded permutation per epoch, cut into batches (wrapping epochs)."""
    if n_examples < 1:
        raise ValueError("no training examples")
    generator = torch.Generator().manual_seed(seed)
    pending: list[int] = []
    while True:
        while len(pending) < batch_size:
            pending += torch.randperm(n_examples, generator=generator).tolist()
        yield pending[:batch_size]
        pending = pending[batch_size:]


@dataclass(frozen=True)
class PackedBatch:
    """B sequences' inputs (each sequence's tokens but its last) as one prefix-shared row (``plan``), and the trained
    targets: ``targets_M[m]`` is predicted from the hidden state in row ``score_rows_M[m]``. A shared row a loss
    token of several members sits in is listed once per member, so the loss sums what per-sequence packing sums."""

    plan: SharedPrefixPlan
    score_rows_M: Tensor
    targets_M: Tensor

    def to(self, device: torch.device) -> PackedBatch:
        """The same batch with every tensor on ``device``."""
        return PackedBatch(self.plan.to(device), self.score_rows_M.to(device), self.targets_M.to(device))


def pack(examples: Sequence[TokenizedTrace], share_prefixes: bool = True) -> PackedBatch:
    """The examples (each ≥ 2 tokens) as one ``PackedBatch`` (``share_prefixes=False``: each example computes its
    own copy of every token, the layout before prefix sharing, kept for ``benchmarks/sft_packing.py``)."""
    if any(len(e.tokens) < 2 or len(e.loss_mask) != len(e.tokens) for e in examples):
        raise ValueError("an SFT example needs at least 2 tokens (an input and a target) and a mask entry per token")
    plan = SharedPrefixPlan.of([e.tokens[:-1] for e in examples], share=share_prefixes)
    trained = [torch.tensor(e.loss_mask[1:], dtype=torch.bool) for e in examples]
    return PackedBatch(
        plan=plan,
        score_rows_M=torch.cat([rows[mask] for rows, mask in zip(plan.rows, trained, strict=True)]),
        targets_M=torch.cat([torch.tensor(e.tokens[1:])[mask] for e, mask in zip(examples, trained, strict=True)]),
    )


def masked_nll(model: PreTrainedModel, batch: PackedBatch) -> Tensor:
    """Mean next-token NLL over masked target positions (formula in the module docstring)."""
    with packed_row_attention(model, SHARED_PREFIX_SDPA):
        hidden_RH = model.model(
            input_ids=batch.plan.input_ids_R[None],
            position_ids=batch.plan.positions_R[None],
            shared_prefix_plan=batch.plan,
            use_cache=False,
        ).last_hidden_state[0]
    # Project to the vocabulary only where the loss looks: assistant tokens are a small share of a trace, and the
    # output layer is the largest matmul of a tiny model.
    logits_MV = model.lm_head(hidden_RH[batch.score_rows_M])
    if logits_MV.shape[0] == 0:
        return logits_MV.sum()  # no target in the batch: zero loss that still has a graph
    return torch.nn.functional.cross_entropy(logits_MV.float(), batch.targets_M)


def train_sft(
    model: PreTrainedModel,
    examples: Sequence[TokenizedTrace],
    config: SftConfig,
    progress: Callable[[str], None] | None = None,
) -> SftResult:
    """Train ``model`` in place on ``examples`` for ``config.steps`` steps (or until the wall-clock limit)."""
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )
    result = SftResult(steps_done=0)
    window: list[float] = []
    started = time.perf_counter()
    model.train()
    batches = batch_order(len(examples), config.batch_size, config.seed)
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        loss = masked_nll(model, pack([examples[i] for i in next(batches)]))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        window.append(loss.item())
        result.steps_done = step + 1
        elapsed = time.perf_counter() - started
        out_of_time = config.max_wall_seconds is not None and elapsed > config.max_wall_seconds
        if result.steps_done % config.log_every == 0 or result.steps_done == config.steps or out_of_time:
            result.losses.append(sum(window) / len(window))
            if progress is not None:
                progress(f"step {result.steps_done}/{config.steps}  loss {result.losses[-1]:.4f}  {elapsed:.0f} s")
            window = []
        if out_of_time:
            result.stopped_early = True
            break
    model.eval()
    result.seconds = time.perf_counter() - started
    result.final_loss = result.losses[-1]
    return result
