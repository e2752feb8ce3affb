"""Retention during RL (PPO-ptx): each optimizer step also takes the next-token loss on a few of the base's own
imitation examples, so RL on one task family does not wear away what the base could do elsewhere.

InstructGPT's PPO-ptx objective (Ouyang et al. 2022, eq. 2) adds γ · E_{x∼D_pretrain}[log π(x)] to the RL objective.
As a loss, per optimizer step k:

    L_k = L_RL + γ · NLL_k,   NLL_k = Σ_{i∈R_k} Σ_t m_{i,t} · (−log π(y_{i,t} | x_{i,<t})) / Σ_{i∈R_k} Σ_t m_{i,t}

with R_k the step's ``examples_per_step`` examples, drawn uniformly without replacement from the retention file by a
generator seeded with (seed, k) — so a resumed run draws what the uninterrupted one would — and m the examples' loss
mask (their assistant tokens). γ = 0 is the recipe's run (it uses no ptx term).

The file is JSON lines, one ``{"source": ..., "tokens": [...], "loss_mask": [...]}`` per example
(``trainer.retention`` writes it from the base's bootstrap spec).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from torch import Tensor
from transformers import PreTrainedModel

from trainer.local.batch import first_fit_decreasing
from trainer.local.config import RetentionConfig
from trainer.sft import masked_nll, pack
from trainer.traces import TokenizedTrace


class RetentionFileError(ValueError):
    """The retention file is missing, empty or has a malformed line."""


def read_retention_file(path: Path) -> list[TokenizedTrace]:
    """The file's examples in order; ``RetentionFileError`` names the line of a malformed one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RetentionFileError(f"retention file {path} cannot be read: {error}") from error
    examples = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
            example = TokenizedTrace([int(t) for t in row["tokens"]], [int(m) for m in row["loss_mask"]])
        except (ValueError, TypeError, KeyError) as error:
            raise RetentionFileError(f"{path}:{number}: not a retention example ({error!r})") from error
        if len(example.tokens) < 2 or len(example.loss_mask) != len(example.tokens) or not any(example.loss_mask):
            raise RetentionFileError(
                f"{path}:{number}: an example needs ≥ 2 tokens, one mask entry per token and a trained token"
            )
        examples.append(example)
    if not examples:
        raise RetentionFileError(f"retention file {path} holds no example")
    return examples


def step_sample(examples: int, per_step: int, seed: int, step: int) -> list[int]:
    """Indices of optimizer step ``step``'s examples: ``min(per_step, examples)`` distinct ones, seeded by
    (seed, step) alone, so they do not depend on what ran before."""
    return sorted(random.Random(f"retention:{seed}:{step}").sample(range(examples), min(per_step, examples)))


class RetentionLoss:
    """γ · NLL_k of the module docstring, back-propagated in bins within the trainer's token budget (packed by
    ``first_fit_decreasing``, as the RL micro-batches are)."""

    def __init__(self, config: RetentionConfig, seed: int) -> None:
        self.config, self.seed = config, seed
        self.examples = read_retention_file(Path(config.path))

    def backward(self, model: PreTrainedModel, step: int, token_budget: int) -> float:
        """Accumulate the gradient of γ · NLL_k into ``model``; returns NLL_k (nats per trained token)."""
        indices = step_sample(len(self.examples), self.config.examples_per_step, self.seed, step)
        chosen = [self.examples[i] for i in indices]
        trained = sum(sum(example.loss_mask[1:]) for example in chosen)
        if trained == 0:
            return 0.0
        device = next(model.parameters()).device
        total = 0.0
        for bin_ in first_fit_decreasing([len(example.tokens) for example in chosen], token_budget):
            batch = pack([chosen[i] for i in bin_]).to(device)
            chunk_tokens = int(batch.mask_N.sum())
            if chunk_tokens == 0:
                continue
            nll: Tensor = masked_nll(model, batch) * (chunk_tokens / trained)
            (self.config.coef * nll).backward()
            total += float(nll.detach())
        return total
