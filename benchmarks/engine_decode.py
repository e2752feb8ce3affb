"""Decode throughput: our local engine vs transformers `generate` on the same tiny Qwen3, batch and lengths.

Both decode greedily with EOS ignored, so each produces exactly batch × new_tokens tokens; the timings include the
prefill of the prompts. Tokens/s = batch × new_tokens / wall seconds, best of `--repeats` runs after one warm-up.
It also reports the share of requests whose greedy tokens agree between the two (a sanity check, not a timing).

    .venv/bin/python benchmarks/engine_decode.py --batch 8 --prompt-len 64 --new-tokens 128
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

import torch

from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.model import TinyModelSpec, build_tiny_model


def best_seconds(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    fn()  # warm-up: allocator, KV pool growth, kernel selection
    timings, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        timings.append(time.perf_counter() - start)
    return min(timings), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, for both")
    args = parser.parse_args()

    spec = TinyModelSpec()
    model = build_tiny_model(spec, args.vocab, {"<|endoftext|>": 0, "<|im_end|>": 1})
    prompts_BP = torch.randint(2, args.vocab, (args.batch, args.prompt_len), generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)

    def hf() -> list[list[int]]:
        with torch.inference_mode():
            out = model.generate(
                prompts_BP,
                attention_mask=torch.ones_like(prompts_BP),
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                do_sample=False,
            )
        return out[:, args.prompt_len :].tolist()

    with Engine(model, config=EngineConfig(max_num_seqs=args.batch, torch_threads=args.threads)) as engine:

        def ours() -> list[list[int]]:
            async def batch() -> list[list[int]]:
                done = await asyncio.gather(*(engine.generate(p, params) for p in prompts_BP.tolist()))
                return [c.token_ids_T for c in done]

            return asyncio.run(batch())

        ours_s, ours_ids = best_seconds(ours, args.repeats)
    torch.set_num_threads(args.threads)  # the engine's worker set it process-wide; say so explicitly for HF
    hf_s, hf_ids = best_seconds(hf, args.repeats)

    n_tokens = args.batch * args.new_tokens
    agree = sum(a == b for a, b in zip(ours_ids, hf_ids, strict=True)) / args.batch
    print(
        f"model: {spec.layers} layers, hidden {spec.hidden}, vocab {args.vocab}; batch {args.batch}, "
        f"prompt {args.prompt_len}, new tokens {args.new_tokens}, threads {args.threads}"
    )
    print(f"{'engine':<14}{'seconds':>10}{'tokens/s':>12}")
    print(f"{'local engine':<14}{ours_s:>10.3f}{n_tokens / ours_s:>12.0f}")
    print(f"{'hf generate':<14}{hf_s:>10.3f}{n_tokens / hf_s:>12.0f}")
    print(f"speed-up (local / hf): {hf_s / ours_s:.2f}x; greedy agreement: {agree:.0%} of requests")


if __name__ == "__main__":
    main()
