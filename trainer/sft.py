"""Supervised fine-tuning on assistant tokens only: the bootstrap's next-token loss, AdamW, warmup + cosine schedule.

Loss of a batch of B token sequences (right-padded), targets y_{i,t+1} predicted from the prefix x_{i,≤t}:

    L = Σ_{i,t} m_{i,t+1} · (−log p_θ(y_{i,t+1} | x_{i,≤t})) / Σ_{i,t} m_{i,t+1}

with m the loss mask (1 on assistant tokens — the ones the policy samples at rollout time — 0 on the prompt,
tool observations and padding). Deterministic: the batch order is a seeded permutation per epoch.

    result = train_sft(model, examples, SftConfig(steps=600, batch_size=64, lr=3e-3), pad_id=tok.pad_token_id)
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


def collate(examples: Sequence[TokenizedTrace], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-padded ``tokens_BT`` and ``mask_BT`` (padding gets mask 0)."""
    width = max(len(e.tokens) for e in examples)
    tokens = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.float32)
    for row, example in enumerate(examples):
        tokens[row, : len(example.tokens)] = torch.tensor(example.tokens)
        mask[row, : len(example.loss_mask)] = torch.tensor(example.loss_mask, dtype=torch.float32)
    return tokens, mask


def masked_nll(model: PreTrainedModel, tokens_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """Mean next-token NLL over masked target positions (formula in the module docstring).

    Right padding needs no attention mask: causal attention never lets a real token see the padding after it.
    """
    hidden_BTH = model.model(input_ids=tokens_BT[:, :-1]).last_hidden_state
    # Project to the vocabulary only where the loss looks: assistant tokens are a small share of a trace, and the
    # output layer is the largest matmul of a tiny model.
    targets = mask_BT[:, 1:].bool()
    logits_NV = model.lm_head(hidden_BTH[targets])
    if logits_NV.shape[0] == 0:
        return logits_NV.sum()  # no target in the batch: zero loss that still has a graph
    return torch.nn.functional.cross_entropy(logits_NV.float(), tokens_BT[:, 1:][targets])


def train_sft(
    model: PreTrainedModel,
    examples: Sequence[TokenizedTrace],
    config: SftConfig,
    pad_id: int,
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
        tokens, mask = collate([examples[i] for i in next(batches)], pad_id)
        loss = masked_nll(model, tokens, mask)
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
