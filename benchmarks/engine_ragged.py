"""Ragged decode vs one run: the same engine and the same 64 mixed requests (prompts 16–512 tokens, 64–192 sampled),
decoded with the batch cut into runs (``forward.decode_runs``, the default) and as one run reading every row up to the
batch's longest position. Tokens/s, best of ``--repeats`` interleaved passes after a warm-up; the ratio is runs / one.

    .venv/bin/python benchmarks/engine_ragged.py [--policy models/base/<hash>] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine import engine as engine_module
from trainer.engine.forward import decode_runs
from trainer.model import load_policy

Requests = list[tuple[list[int], int]]


def mixed_requests(vocab: int, n: int = 64, seed: int = 0) -> Requests:
    rng = random.Random(seed)
    return [([rng.randrange(10, vocab) for _ in range(rng.randint(16, 512))], rng.randint(64, 192)) for _ in range(n)]


async def tokens_per_s(engine: Engine, requests: Requests) -> float:
    params = [SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True) for _, n in requests]
    started = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(p, s) for (p, _), s in zip(requests, params, strict=True)))
    return sum(len(r.token_ids_T) for r in results) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=None, help="policy folder (default: first in models/base)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    policy = args.policy or sorted(p for p in Path("models/base").iterdir() if p.is_dir())[0]
    model, tokenizer = load_policy(policy)
    requests = mixed_requests(model.config.vocab_size)
    cuts = {"one run": lambda positions: decode_runs(positions, 1), "runs": decode_runs}
    best = dict.fromkeys(cuts, 0.0)
    with Engine(model, tokenizer, EngineConfig(max_num_seqs=64, max_model_len=1024)) as engine:
        asyncio.run(tokens_per_s(engine, requests))  # warm-up
        for _ in range(args.repeats):
            for name, cut in cuts.items():
                engine_module.decode_runs = cut
                best[name] = max(best[name], asyncio.run(tokens_per_s(engine, requests)))
    print(f"policy {policy}: " + ", ".join(f"{name} {value:.0f} tok/s" for name, value in best.items()))
    print(f"runs / one run: {best['runs'] / best['one run']:.3f}x")


if __name__ == "__main__":
    main()
