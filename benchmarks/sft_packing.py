"""The base bootstrap's SFT step, prefix-shared vs packed vs right-padded: the local profile's own examples, same
batches, same model.

The examples are the ones `recipe run --profile local` bootstraps its base on (its traces through both harnesses
and the multiple-choice examples, rendered by its tokenizer; the environment is built under data/ if missing).
Batches are drawn as the bootstrap draws them (``batch_order``: a seeded permutation, the profile's batch size).
Each step is a full SFT step (forward, loss over assistant tokens, backward, AdamW) on a copy of the same fresh
model: shared (``trainer.sft``'s layout) runs the batch as one row in which examples that start alike hold their
common prefix once (``trainer.local.prefix_sharing``); packed, the layout before it, runs every example's tokens back
to back with attention per sequence; padded, the one before that, right-pads the batch to its longest example. Steps
rotate between the three, so load from other processes hits all alike; tokens/s = real (unpadded) tokens / step wall
time, best of --repeats steps per batch. Also printed: the share of the padded layout's positions that are padding,
the shared row's size against the packed one's, and the largest |Δ loss| between the layouts on the same batch.

    .venv/bin/python benchmarks/sft_packing.py --batches 4 --repeats 2
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor
from transformers import PreTrainedModel

from envs.build import environment_build, load_tasks
from flows.config import load_profile
from trainer.bootstrap import draw_imitation_set, select_tasks, tokenize_imitation_set
from trainer.model import build_tiny_model, special_token_ids
from trainer.sft import batch_order, masked_nll, pack
from trainer.traces import TokenizedTrace


def padded_nll(model: PreTrainedModel, examples: Sequence[TokenizedTrace], pad_id: int) -> Tensor:
    """The baseline: the batch right-padded to its longest example; the same mean NLL over the same targets."""
    width = max(len(e.tokens) for e in examples)
    tokens = torch.full((len(examples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(examples), width), dtype=torch.bool)
    for row, example in enumerate(examples):
        tokens[row, : len(example.tokens)] = torch.tensor(example.tokens)
        mask[row, : len(example.loss_mask)] = torch.tensor(example.loss_mask, dtype=torch.bool)
    hidden = model.model(input_ids=tokens[:, :-1]).last_hidden_state
    targets = mask[:, 1:]
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[targets]).float(), tokens[:, 1:][targets])


def timed_step(model: PreTrainedModel, optimizer: torch.optim.Optimizer, loss_fn) -> tuple[float, float]:
    started = time.perf_counter()
    loss = loss_fn()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - started, loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="local")
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (the bootstrap uses them all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    profile = load_profile(args.profile)
    spec = profile.policy.bootstrap
    data = environment_build(
        Path(profile.environment.data),
        seed=profile.environment.seed,
        worlds_per_domain=profile.environment.worlds_per_domain,
    )
    tokenized = tokenize_imitation_set(
        draw_imitation_set(select_tasks(load_tasks(data), spec), data / "worlds", spec), spec
    )
    examples, pad_id = tokenized.examples, int(tokenized.tokenizer.pad_token_id)
    lengths = sorted(len(e.tokens) for e in examples)
    print(
        f"{len(examples)} examples of the {args.profile} bootstrap: tokens min {lengths[0]}, median "
        f"{lengths[len(lengths) // 2]}, max {lengths[-1]}; batch size {spec.batch_size}"
    )

    fresh = build_tiny_model(
        spec.model.model_copy(update={"seed": spec.seed}),
        len(tokenized.tokenizer),
        special_token_ids(tokenized.tokenizer),
    )
    loss_fns = {
        "shared": lambda model, batch: masked_nll(model, pack(batch)),
        "packed": lambda model, batch: masked_nll(model, pack(batch, share_prefixes=False)),
        "padded": lambda model, batch: padded_nll(model, batch, pad_id),
    }
    models = {name: copy.deepcopy(fresh) for name in loss_fns}
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=spec.lr) for name, model in models.items()}
    batches = batch_order(len(examples), spec.batch_size, spec.seed)
    best: dict[str, list[float]] = {name: [] for name in loss_fns}
    real_tokens, padded_positions, shared_rows, max_delta = 0, 0, 0, 0.0
    for _ in range(args.batches):
        batch = [examples[i] for i in next(batches)]
        real_tokens += sum(len(e.tokens) for e in batch)
        padded_positions += len(batch) * max(len(e.tokens) for e in batch)
        shared_rows += len(pack(batch).plan.input_ids_R) + len(batch)  # + each example's last token, as counted above
        seconds: dict[str, list[float]] = {name: [] for name in loss_fns}
        for _ in range(args.repeats):
            losses = {}
            for name, loss_fn in loss_fns.items():
                step_s, losses[name] = timed_step(models[name], optimizers[name], partial(loss_fn, models[name], batch))
                seconds[name].append(step_s)
            max_delta = max(max_delta, max(losses.values()) - min(losses.values()))
        for name in loss_fns:
            best[name].append(min(seconds[name]))
    rate = {name: real_tokens / sum(best[name]) for name in loss_fns}
    print(f"padding: {1 - real_tokens / padded_positions:.1%} of the padded layout's positions")
    print(f"shared prefixes: the shared row holds {shared_rows / real_tokens:.1%} of the packed row's tokens")
    for name in loss_fns:
        print(f"{name:7s} {rate[name]:8.0f} tok/s  ({sum(best[name]) / args.batches:.2f} s a step)")
    print(
        f"shared / packed: {rate['shared'] / rate['packed']:.2f}x; packed / padded: "
        f"{rate['packed'] / rate['padded']:.2f}x; max |Δ loss| between layouts on the same batch {max_delta:.1e}"
    )


if __name__ == "__main__":
    main()
