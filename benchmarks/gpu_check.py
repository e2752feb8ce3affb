"""The GPU check: our engine and trainer in bf16 on one CUDA device, on the tiny model, in well under five minutes.

Prints, for the default tiny Qwen3 (random weights: speed and agreement do not depend on what the model learnt):

* engine decode: ``--requests`` concurrent requests of ``--prompt-len`` + ``--new-tokens`` (EOS ignored, seeded
  sampling at temperature 1) → generated tokens/s;
* train–inference mismatch: the trainer's log π of the sampled tokens (``trainer.local.token_stats``, the packed
  path the trainer steps with) against the engine's, mean and max |Δ| over all sampled tokens — what the TITO and
  systems gates bound (RECIPE: the recipe's DPPO trust region exists because this is never exactly 0 in bf16);
* trainer step: one AdamW step on those trajectories (groups of 8, alternating rewards) → tokens/s.

    bash benchmarks/gpu_check.sh                      # = python benchmarks/gpu_check.py, on cuda:0 in bf16
    .venv/bin/python benchmarks/gpu_check.py --device cpu --dtype float32 --requests 4 --new-tokens 16   # the path

Exits 2 with one line when the device is not there (no CUDA here: the check is meant for a lent GPU machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import torch

from envs.types import Trajectory
from trainer.algorithms.config import AlgorithmConfig
from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine.types import Completion
from trainer.local import LocalTrainer, TrainBatch, TrainerConfig, token_stats
from trainer.model import TinyModelSpec, build_tiny_model

DTYPES = {"bf16": torch.bfloat16, "float32": torch.float32}
SPECIALS = {"<|endoftext|>": 0, "<|im_end|>": 1}
GROUP = 8


def decode(engine: Engine, prompts: list[list[int]], new_tokens: int) -> tuple[list[Completion], float]:
    """All ``prompts`` at once, each sampled with its own seed; (completions, wall seconds)."""

    async def run() -> list[Completion]:
        params = [SamplingParams(seed=i, max_tokens=new_tokens, ignore_eos=True) for i in range(len(prompts))]
        return await asyncio.gather(*(engine.generate(p, q) for p, q in zip(prompts, params, strict=True)))

    started = time.perf_counter()
    done = asyncio.run(run())
    return done, time.perf_counter() - started


def trajectories_of(completions: list[Completion]) -> list[Trajectory]:
    """Prompt + sampled tokens with the engine's logprobs, in groups of ``GROUP`` with alternating rewards."""
    out = []
    for i, done in enumerate(completions):
        prompt, sampled = done.prompt_token_ids, done.token_ids_T
        out.append(
            Trajectory(
                task_id=f"t{i // GROUP}",
                group_id=f"g{i // GROUP}",
                sample_index=i % GROUP,
                tokens=[*prompt, *sampled],
                loss_mask=[0] * len(prompt) + [1] * len(sampled),
                logprobs=[0.0] * len(prompt) + list(done.logprobs_T),
                prompt_len=len(prompt),
                reward=float(i % 2),
            )
        )
    return out


def mismatch(model: torch.nn.Module, batch: TrainBatch, device: torch.device) -> tuple[float, float]:
    """Mean and max |trainer log π − engine log π| over the sampled (loss-mask) tokens."""
    with torch.no_grad():
        stats = token_stats(model, batch.tokens_BT.to(device), batch.lengths_B.to(device))
    mask = batch.loss_mask_BT.to(device).bool()
    delta = (stats.logprobs_SL.float() - batch.rollout_logprobs_BT.to(device))[mask].abs()
    return float(delta.mean()), float(delta.max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4096)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False); run it on a GPU machine")
        return 2

    torch.manual_seed(0)
    model = build_tiny_model(TinyModelSpec(), args.vocab, SPECIALS).to(device=device, dtype=DTYPES[args.dtype])
    prompts = torch.randint(2, args.vocab, (args.requests, args.prompt_len)).tolist()
    with Engine(model, config=EngineConfig(max_num_seqs=args.requests)) as engine:
        decode(engine, prompts[:2], 8)  # warm-up: allocator, kernels
        completions, decode_s = decode(engine, prompts, args.new_tokens)
    batch = TrainBatch.from_trajectories(trajectories_of(completions), AlgorithmConfig())
    mean_delta, max_delta = mismatch(model, batch, device)
    trainer = LocalTrainer(model.train(), TrainerConfig(lr=1e-6, token_budget=8192))
    trainer.train_step(batch)  # warm-up step
    step = trainer.train_step(batch)
    report = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else str(device),
        "dtype": args.dtype,
        "engine_tokens_per_s": round(args.requests * args.new_tokens / decode_s, 1),
        "mismatch_mean_abs": mean_delta,
        "mismatch_max_abs": max_delta,
        "trainer_tokens_per_s": round(step.tokens_per_s, 1),
    }
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
