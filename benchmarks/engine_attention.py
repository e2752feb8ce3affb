"""The decode-attention kernel vs attention in torch: the same engine and the same 64 mixed requests (prompts 16–512
tokens, 64–192 sampled), decoding with ``torch.ops.rl_recipe.decode_attention`` (``trainer/engine/kernels.py``, each
row reading only its own cached keys) and with ``forward.attend`` (a batched matmul over every row up to the batch's
longest, what a machine without a C++ compiler runs). Tokens/s, best of ``--repeats`` interleaved passes after a
warm-up, eager and ``--compile``; the ratio is kernel / torch. One torch thread, as the engine server runs.

    .venv/bin/python benchmarks/engine_attention.py [--policy models/base/<hash>] [--repeats 3] [--compile]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from pathlib import Path

import torch

from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine import forward as forward_module
from trainer.engine.kernels import decode_attention_op
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
    parser.add_argument("--policy", type=Path, default=None, help="policy folder (default: newest in models/base)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="torch.compile the decode step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = args.policy or max(Path("models/base").glob("*/config.json"), key=lambda p: p.stat().st_mtime).parent
    kernel = decode_attention_op()
    if kernel is None:
        raise SystemExit("the decode-attention kernel could not be built (see the warning above)")
    model, tokenizer = load_policy(policy)
    requests = mixed_requests(model.config.vocab_size)
    attentions = {"torch": None, "kernel": kernel}
    best = dict.fromkeys(attentions, 0.0)
    config = EngineConfig(max_num_seqs=64, max_model_len=1024, compile=args.compile)
    for repeat in range(args.repeats + 1):  # pass 0 warms up (and compiles)
        for name, attention in attentions.items():
            forward_module.decode_attention_op = lambda attention=attention: attention
            with Engine(model, tokenizer, config) as engine:
                tokens_s = asyncio.run(tokens_per_s(engine, requests))
            best[name] = max(best[name], tokens_s) if repeat else 0.0
    mode = "compiled" if args.compile else "eager"
    print(f"policy {policy} ({mode}): " + ", ".join(f"{name} {value:.0f} tok/s" for name, value in best.items()))
    print(f"kernel / torch: {best['kernel'] / best['torch']:.2f}x")


if __name__ == "__main__":
    main()
