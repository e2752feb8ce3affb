"""Retention during RL (PPO-ptx): each optimizer step also takes the next-token loss on a few of the base's own
imitation examples, so RL on one task family does not wear away what the base could do elsewhere.

InstructGPT's PPO-ptx objective (Ouyang et al. 2022, eq. 2) adds γ · E_{x∼D_pretrain}[log π(x)] to the RL objective.
As a loss, per optimizer step k:

    L_k = L_RL + γ · NLL_k,   NLL_k = Σ_{i∈R_k} Σ_t m_{i,t} · (−log π(y_{i,t} | x_{i,<t})) / Σ_{i∈R_k} Σ_t m_{i,t}

with R_k the step's ``examples_per_step`` examples and m the examples' loss mask (their assistant tokens). γ = 0 is the
recipe's run (it uses no ptx term). R_k is dealt round-robin over the file's sources, one example of each in turn
until the step has its count, each source's examples in a shuffled order, so every format has an equal share of the
draw whatever the pool sizes (uniform over one pool, the 11 terminal examples among 319 code-only ones were 3 % of a
step, and a 40-step hero lost terminal 0.966 → 0.886). The shuffle is seeded by (seed, k) alone, so a resumed run
draws what the uninterrupted one would.

The file is JSON lines, one ``{"source": ..., "tokens": [...], "loss_mask": [...]}`` per example
(``trainer.retention`` writes it from the base's bootstrap spec).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor
from transformers import PreTrainedModel

from trainer.local.batch import shared_prefix_bins
from trainer.local.config import RetentionConfig
from trainer.sft import masked_nll, pack
from trainer.traces import TokenizedTrace


class RetentionFileError(ValueError):
    """The retention file is missing, empty or has a malformed line."""


@dataclass(frozen=True)
class RetentionSet:
    """The retention file's examples in order, and the source (format) of each."""

    examples: list[TokenizedTrace]
    sources: list[str]


def read_retention_file(path: Path) -> RetentionSet:
    """The file's examples in order; ``RetentionFileError`` names the line of a malformed one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise RetentionFileError(f"retention file {path} cannot be read: {error}") from error
    examples, sources = [], []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
            example = TokenizedTrace([int(t) for t in row["tokens"]], [int(m) for m in row["loss_mask"]])
            source = row["source"]
        except (ValueError, TypeError, KeyError) as error:
            raise RetentionFileError(f"{path}:{number}: not a retention example ({error!r})") from error
        if len(example.tokens) < 2 or len(example.loss_mask) != len(example.tokens) or not any(example.loss_mask):
            raise RetentionFileError(
                f"{path}:{number}: an example needs ≥ 2 tokens, one mask entry per token and a trained token"
            )
        if not isinstance(source, str) or not source:
            raise RetentionFileError(f"{path}:{number}: an example's source must be a format's name, not {source!r}")
        examples.append(example)
        sources.append(source)
    if not examples:
        raise RetentionFileError(f"retention file {path} holds no example")
    return RetentionSet(examples, sources)


def step_sample(sources: Sequence[str], per_step: int, seed: int, step: int) -> list[int]:
    """Indices of optimizer step ``step``'s examples, ``sources[i]`` being example i's source: ``min(per_step,
    len(sources))`` distinct ones dealt round-robin over the sources (in order of first appearance, the first source
    to deal rotating with the step so that a remainder falls on each in turn), each source's examples in an order
    shuffled by (seed, step) alone, so the draw does not depend on what ran before. A source with fewer examples than
    its share gives all of them, and the others fill its place."""
    rng = random.Random(f"retention:{seed}:{step}")
    pools: dict[str, list[int]] = {}
    for index, source in enumerate(sources):
        pools.setdefault(source, []).append(index)
    for pool in pools.values():
        rng.shuffle(pool)
    order = list(pools.values())
    order = order[step % len(order) :] + order[: step % len(order)]
    dealt = [pool[depth] for depth in range(max(map(len, order))) for pool in order if depth < len(pool)]
    return sorted(dealt[:per_step])


class RetentionLoss:
    """γ · NLL_k of the module docstring, back-propagated in bins within the trainer's token budget (prefix groups
    kept together, ``batch.shared_prefix_bins``, as the shared-prefix RL micro-batches are)."""

    def __init__(self, config: RetentionConfig, seed: int) -> None:
        self.config, self.seed = config, seed
        self.retention_set = read_retention_file(Path(config.path))

    def backward(self, model: PreTrainedModel, step: int, token_budget: int) -> float:
        """Accumulate the gradient of γ · NLL_k into ``model``; returns NLL_k (nats per trained token)."""
        indices = step_sample(self.retention_set.sources, self.config.examples_per_step, self.seed, step)
        chosen = [self.retention_set.examples[i] for i in indices]
        trained = sum(sum(example.loss_mask[1:]) for example in chosen)
        if trained == 0:
            return 0.0
        device = next(model.parameters()).device
        total = 0.0
        for bin_ in shared_prefix_bins([example.tokens[:-1] for example in chosen], token_budget):
            batch = pack([chosen[i] for i in bin_]).to(device)
            chunk_tokens = len(batch.targets_M)
            if chunk_tokens == 0:
                continue
            nll: Tensor = masked_nll(model, batch) * (chunk_tokens / trained)
            (self.config.coef * nll).backward()
            total += float(nll.detach())
        return total
