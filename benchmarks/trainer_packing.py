"""Trainer throughput by micro-batch layout — shared-prefix, packed, padded: same trajectories, model, token budget.

Every layout takes full train steps (forward, policy loss, backward, AdamW) of ``LocalTrainer`` over one mini-batch
whose trajectory lengths follow the overfit stage's rollouts (``OVERFIT_LENGTHS``: quantiles of the 2048 train
trajectories of a ``local`` profile run, 128 per step = 16 prompts × 8 samples, each group's rows sharing one
``--prompt-len`` prompt as GRPO's do, token budget 4096 as in deployments/profiles/local.yaml; ``--catalog
runs/<run>/catalog.duckdb`` samples a run's own overfit lengths instead). Only ``TrainerConfig.layout`` differs.
Shared-prefix rows hold each group's prompt once (trainer/local/prefix_sharing.py); packed rows compute Σ len tokens
with attention per sequence (Σ len², trainer/local/packed_attention.py); padded rows compute rows × longest. The steps
of the layouts are interleaved, so load from other processes hits all alike; tokens/s = real (unpadded) tokens / step
wall time, best of --repeats steps after one warm-up step each; tokens per CPU second of this process are printed
too, as other processes' load does not reach them. It also prints how far each layout's log-probs are from the padded
ones (max |Δ| over the mini-batch's first shared-prefix micro-batch).

What to expect (2-core CPU, quiet, 1 thread, --vocab 2048, 2026-12-03): shared_prefix 1.87× packed (it computes
0.38× the tokens), packed 1.23× padded. Padding wastes only ~4 % on this mix (first-fit decreasing bins similar
lengths together); a wide length spread (--min-len 16 --max-len 512 --trajectories 32: log-uniform lengths) adds the
padding packing saves. The ratios printed are measured, whichever way they fall.

    .venv/bin/python benchmarks/trainer_packing.py --repeats 3
"""

from __future__ import annotations

import argparse
import copy
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from envs.types import Trajectory
from trainer.algorithms import AlgorithmConfig
from trainer.local import Layout, LocalTrainer, TrainBatch, TrainerConfig, token_stats
from trainer.local.batch import BIN_COSTS, MicroBatch
from trainer.local.prefix_sharing import SharedPrefixPlan
from trainer.model import TinyModelSpec, build_tiny_model

# (quantile, tokens) of the overfit stage's train trajectories (local profile run, 2048 trajectories); the mean
# prompt is 217 tokens. Lengths are drawn by linear interpolation of this inverse CDF.
OVERFIT_LENGTHS = (
    (0.0, 264),
    (0.1, 265),
    (0.2, 273),
    (0.3, 281),
    (0.4, 284),
    (0.5, 292),
    (0.6, 294),
    (0.7, 299),
    (0.8, 304),
    (0.9, 310),
    (0.95, 331),
    (0.975, 457),
    (0.99, 582),
    (1.0, 781),
)
OVERFIT_PROMPT_LEN = 217


def overfit_lengths(count: int, seed: int) -> list[int]:
    """``count`` lengths drawn from the ``OVERFIT_LENGTHS`` inverse CDF."""
    quantiles, tokens = zip(*OVERFIT_LENGTHS, strict=True)
    uniform = np.random.default_rng(seed).random(count)
    return [round(float(length)) for length in np.interp(uniform, quantiles, tokens)]


def catalog_lengths(catalog: str, count: int, seed: int) -> list[int]:
    """``count`` lengths sampled (with replacement) from the overfit stage's train trajectories in a run catalog."""
    import duckdb  # only this option reads a catalog

    with duckdb.connect(catalog, read_only=True) as db:
        rows = db.sql("select n_tokens from trajectories where stage = 'overfit' and source like 'train/%'").fetchall()
    if not rows:
        raise SystemExit(f"{catalog} holds no overfit train trajectories")
    return np.random.default_rng(seed).choice([n for (n,) in rows], count).tolist()


def log_uniform_lengths(count: int, min_len: int, max_len: int, seed: int) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    log_lengths = torch.empty(count).uniform_(math.log(min_len), math.log(max_len), generator=generator)
    return log_lengths.exp().round().long().tolist()


def trajectories_of(lengths: list[int], prompt_len: int, vocab: int, seed: int) -> list[Trajectory]:
    """Trajectories of ``lengths`` in groups of 8, each group's with one ``prompt_len`` prompt, alternating rewards."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for i, length in enumerate(lengths):
        prompt = min(prompt_len, length - 1)
        mask = [int(t >= prompt) for t in range(length)]
        if i % 8 == 0:  # a group's samples continue one prompt
            group_prompt = torch.randint(2, vocab, (prompt_len,), generator=generator).tolist()
        completion = torch.randint(2, vocab, (length - prompt,), generator=generator).tolist()
        out.append(
            Trajectory(
                task_id=f"t{i // 8}",
                group_id=f"g{i // 8}",
                sample_index=i % 8,
                tokens=group_prompt[:prompt] + completion,
                loss_mask=mask,
                logprobs=[-math.log(vocab) * m for m in mask],
                prompt_len=prompt,
                reward=float(i % 2),
            )
        )
    return out


def logprobs_vs_padded(model: torch.nn.Module, batch: TrainBatch, token_budget: int) -> dict[Layout, float]:
    """max |log π of each layout − log π padded| over the first shared-prefix micro-batch."""
    micro = batch.micro_batches(token_budget, Layout.SHARED_PREFIX)[0]
    device = next(model.parameters()).device
    tokens_SL, lengths_S = micro.take(batch.tokens_BT).to(device), batch.lengths_B[micro.rows_S].to(device)
    with torch.no_grad():
        logprobs = {layout: token_stats(model, tokens_SL, lengths_S, layout).logprobs_SL for layout in Layout}
    return {layout: float((lp - logprobs[Layout.PADDED]).abs().max()) for layout, lp in logprobs.items()}


@dataclass
class Rates:
    """Best real tokens per wall second and per CPU second (this process) over the measured steps."""

    wall: float = 0.0
    cpu: float = 0.0


def interleaved_rates(trainers: dict[Layout, LocalTrainer], batch: TrainBatch, repeats: int) -> dict[Layout, Rates]:
    """Best rates per layout over ``repeats`` rounds of one step each (after a warm-up step each). CPU seconds are
    this process's only, so other processes' load on a busy machine does not count against either layout."""
    for trainer in trainers.values():
        trainer.train_step(batch)
    best = {layout: Rates() for layout in trainers}
    for _ in range(repeats):
        for layout, trainer in trainers.items():
            started = time.process_time()
            metrics = trainer.train_step(batch)
            cpu_rate = batch.num_tokens / (time.process_time() - started)
            best[layout] = Rates(max(best[layout].wall, metrics.tokens_per_s), max(best[layout].cpu, cpu_rate))
    return best


def batch_lengths(args: argparse.Namespace) -> list[int]:
    """The mini-batch's lengths: a run's overfit lengths, the built-in overfit mix, or log-uniform when asked."""
    if args.catalog:
        return catalog_lengths(args.catalog, args.trajectories, args.seed)
    if args.min_len is not None:
        return log_uniform_lengths(args.trajectories, args.min_len, args.max_len, args.seed)
    return overfit_lengths(args.trajectories, args.seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=128, help="mini-batch size (overfit: 16 prompts × 8)")
    parser.add_argument("--catalog", help="sample the overfit lengths of this run catalog (runs/<run>/catalog.duckdb)")
    parser.add_argument("--min-len", type=int, help="log-uniform lengths in [--min-len, --max-len] instead")
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--prompt-len", type=int, default=OVERFIT_PROMPT_LEN)
    parser.add_argument("--token-budget", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=384)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="e.g. cuda (CPU seconds then measure only the host side)")
    parser.add_argument("--dtype", choices=["float32", "bf16"], default="float32")
    args = parser.parse_args()
    if args.min_len is not None and not 2 <= args.min_len <= args.max_len:
        parser.error(f"need 2 ≤ --min-len ≤ --max-len, got {args.min_len} and {args.max_len}")

    torch.set_num_threads(args.threads)
    spec = TinyModelSpec(layers=args.layers, hidden=args.hidden, heads=args.heads, intermediate=args.intermediate)
    model = build_tiny_model(spec, args.vocab, {"<|endoftext|>": 0, "<|im_end|>": 1}).to(
        device=args.device, dtype=torch.bfloat16 if args.dtype == "bf16" else torch.float32
    )
    trajectories = trajectories_of(batch_lengths(args), args.prompt_len, args.vocab, args.seed)
    batch = TrainBatch.from_trajectories(trajectories, AlgorithmConfig())
    lengths = batch.lengths_B.tolist()
    print(
        f"{len(lengths)} trajectories, {sum(lengths)} tokens (lengths {min(lengths)}..{max(lengths)}, median "
        f"{int(np.median(lengths))}), token budget {args.token_budget}, model {args.layers}x{args.hidden} "
        f"(MLP {args.intermediate}), {args.threads} thread(s), {args.device} {args.dtype}"
    )
    deltas = logprobs_vs_padded(model, batch, args.token_budget)
    print("log-probs vs padded, max |Δ|: " + ", ".join(f"{layout} {delta:.1e}" for layout, delta in deltas.items()))

    # lr tiny so the weights barely move between repeats; both layouts start from the same weights
    trainers = {
        layout: LocalTrainer(
            copy.deepcopy(model), TrainerConfig(lr=1e-9, token_budget=args.token_budget, layout=layout)
        )
        for layout in Layout
    }
    best = interleaved_rates(trainers, batch, args.repeats)
    for layout, rates in best.items():
        micro_batches = batch.micro_batches(args.token_budget, layout)
        computed = sum(computed_tokens(batch, micro, layout) for micro in micro_batches)
        print(
            f"{layout.value:>13}: {rates.wall:8.0f} tokens/s wall  {rates.cpu:8.0f} tokens/CPU-s  "
            f"{len(micro_batches):3d} micro-batches  {computed} computed tokens ({computed / sum(lengths):.2f}x real)"
        )
    shared, packed, padded = best[Layout.SHARED_PREFIX], best[Layout.PACKED], best[Layout.PADDED]
    print(
        f"shared_prefix / packed: {shared.wall / packed.wall:.2f}x wall, {shared.cpu / packed.cpu:.2f}x CPU; "
        f"packed / padded: {packed.wall / padded.wall:.2f}x wall, {packed.cpu / padded.cpu:.2f}x CPU "
        f"(best of {args.repeats}, interleaved)"
    )


def computed_tokens(batch: TrainBatch, micro: MicroBatch, layout: Layout) -> int:
    """Tokens the micro-batch's forward computes in ``layout``."""
    lengths = batch.lengths_B[micro.rows_S].tolist()
    if layout is Layout.SHARED_PREFIX:
        rows = [row[:n] for row, n in zip(micro.take(batch.tokens_BT).tolist(), lengths, strict=True)]
        return len(SharedPrefixPlan.of(rows).input_ids_R)
    return BIN_COSTS.get(layout)(lengths)


if __name__ == "__main__":
    main()
