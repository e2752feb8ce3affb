"""Decode throughput: our local engine vs transformers `generate` on the same tiny Qwen3, batches and lengths.

Static scenario: per batch size, each engine decodes greedily with EOS ignored (HF: `generate`, use_cache=True, its own
KV cache), so each produces exactly batch × new_tokens tokens; timings include the prefill. Engines: ours with the
eager decode step, ours with the torch.compile'd one (`EngineConfig.compile`; compiled before timing), HF. Tokens/s =
batch × new_tokens / wall seconds, best of `--repeats` runs after one warm-up, the engines' runs interleaved so that
load from other processes hits all alike. Also prints the share of requests whose greedy tokens agree with HF's.

Matmul floor: the wall time of only the decode step's matmuls at that batch (every layer's qkv, o, gate/up and down
projections, then the output layer: one `F.linear` each, the same MKL calls both engines make) × new_tokens. No fp32
engine decodes faster than this, so `hf / floor` is the largest speed-up over HF any engine could show at that batch.

Serving scenario: `--requests` greedy requests with prompt and output lengths drawn uniformly from
[`--min-len`, `--max-len`] arrive at exponential gaps (mean `--gap-ms`). Ours: each is submitted at its arrival time
and joins the running batch (continuous batching, `--slots` KV slots). HF: static padded batches of `--slots`
requests in arrival order; a batch starts when its last request has arrived and the previous batch is done, left-pads
its prompts and generates the batch's longest output length. Throughput = requested output tokens / makespan.

Multi-turn scenario (what RL rollouts ask of an engine): `--rollouts` agents in lockstep, each `--turns` turns;
turn k's prompt is turn k-1's prompt + its `--turn-tokens` greedy tokens + an observation of `--obs-len` tokens
(TITO); the first prompt (`--turn-prompt-len`, default 1024: this project's prompts with a compact tool listing are
~900 tokens, with full JSON schemas several thousand) stands for system prompt + tools + task. HF: one `generate`
per turn over the batch of whole contexts (re-prefilled every turn: `generate` keeps no cache between calls). Ours:
every rollout is its own chain of requests on one engine, with and without the prefix cache (which parks each
finished turn, so the next turn prefills only the observation). Tokens/s counts sampled tokens; the greedy tokens of
all three must agree.

    .venv/bin/python benchmarks/engine_decode.py --batch 1 8 32 --prompt-len 64 --new-tokens 128
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import Qwen3ForCausalLM

from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine.forward import ModelWeights
from trainer.model import TinyModelSpec, build_tiny_model


@dataclass(frozen=True)
class Request:
    arrival_s: float
    prompt: list[int]
    new_tokens: int


def interleaved_best(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[float, object]]:
    """Best wall seconds (and last result) per function; one warm-up each, then the functions alternate."""
    for fn in fns.values():
        fn()  # warm-up: allocator, KV pool growth, kernel selection, torch.compile
    best: dict[str, tuple[float, object]] = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            result = fn()
            seconds = time.perf_counter() - start
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, result)
    return best


def hf_greedy(model: Qwen3ForCausalLM, prompts_BP: torch.Tensor, mask_BP: torch.Tensor, n: int) -> list[list[int]]:
    with torch.inference_mode():
        out = model.generate(
            prompts_BP, attention_mask=mask_BP, max_new_tokens=n, min_new_tokens=n, do_sample=False, use_cache=True
        )
    return out[:, prompts_BP.shape[1] :].tolist()


def matmul_floor_s(model: Qwen3ForCausalLM, batch: int, steps: int, repeats: int = 20) -> float:
    """Seconds for `steps` decode steps' matmuls alone at `batch` rows (best of `repeats`), fused as our engine
    fuses them (qkv and gate/up in one matmul each)."""
    weights = ModelWeights.from_hf(model, max_len=2)
    lw = weights.layers
    shapes = [w[i] for i in range(weights.n_layers) for w in (lw.qkv_proj, lw.o_proj, lw.gate_up_proj, lw.down_proj)]
    shapes.append(weights.lm_head)
    inputs = [torch.randn(batch, w.shape[1]) for w in shapes]
    best = float("inf")
    with torch.inference_mode():
        for _ in range(repeats):
            start = time.perf_counter()
            for x, w in zip(inputs, shapes, strict=True):
                F.linear(x, w)
            best = min(best, time.perf_counter() - start)
    return best * steps


def static_scenario(model: Qwen3ForCausalLM, batch: int, args: argparse.Namespace) -> None:
    prompts_BP = torch.randint(2, args.vocab, (batch, args.prompt_len), generator=torch.Generator().manual_seed(0))
    params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
    config = EngineConfig(max_num_seqs=batch, torch_threads=args.threads)
    with (
        Engine(model, config=config) as eager,
        Engine(model, config=config.model_copy(update={"compile": True})) as compiled,
    ):

        def ours(engine: Engine) -> Callable[[], list[list[int]]]:
            async def run() -> list[list[int]]:
                done = await asyncio.gather(*(engine.generate(p, params) for p in prompts_BP.tolist()))
                return [c.token_ids_T for c in done]

            return lambda: asyncio.run(run())

        def hf() -> list[list[int]]:
            return hf_greedy(model, prompts_BP, torch.ones_like(prompts_BP), args.new_tokens)

        best = interleaved_best({"eager": ours(eager), "compiled": ours(compiled), "hf": hf}, args.repeats)
    n_tokens = batch * args.new_tokens
    hf_s, hf_ids = best["hf"]
    floor_s = matmul_floor_s(model, batch, args.new_tokens)
    cells = []
    for name in ("eager", "compiled"):
        seconds, ids = best[name]
        agree = sum(a == b for a, b in zip(ids, hf_ids, strict=True)) / batch
        cells.append(f"{name} {n_tokens / seconds:>7.0f} tok/s {hf_s / seconds:4.2f}x (agree {agree:.0%})")
    print(
        f"batch {batch:>3}: hf {n_tokens / hf_s:>7.0f} tok/s | "
        + " | ".join(cells)
        + f" | matmul floor {n_tokens / floor_s:>7.0f} tok/s: hf/floor {hf_s / floor_s:4.2f}x"
    )


def make_requests(args: argparse.Namespace) -> list[Request]:
    rng = random.Random(1)
    clock, requests = 0.0, []
    for _ in range(args.requests):
        clock += rng.expovariate(1000.0 / args.gap_ms)
        prompt = [rng.randrange(2, args.vocab) for _ in range(rng.randint(args.min_len, args.max_len))]
        requests.append(Request(clock, prompt, rng.randint(args.min_len, args.max_len)))
    return requests


def serve_ours(model: Qwen3ForCausalLM, requests: list[Request], args: argparse.Namespace, compile: bool) -> float:
    """Makespan in seconds with every request submitted at its arrival time."""
    config = EngineConfig(max_num_seqs=args.slots, torch_threads=args.threads, compile=compile)
    with Engine(model, config=config) as engine:

        async def one(req: Request, t0: float) -> None:
            await asyncio.sleep(max(0.0, t0 + req.arrival_s - time.perf_counter()))
            params = SamplingParams(temperature=0.0, max_tokens=req.new_tokens, ignore_eos=True)
            await engine.generate(req.prompt, params)

        async def run() -> float:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(r, t0) for r in requests))
            return time.perf_counter() - t0

        asyncio.run(run())  # warm-up
        return asyncio.run(run())


def serve_hf_static(model: Qwen3ForCausalLM, requests: list[Request], args: argparse.Namespace) -> float:
    """Makespan on a virtual clock: batch i starts at max(end of batch i-1, arrival of its last request)."""
    clock = 0.0
    for i in range(0, len(requests), args.slots):
        group = requests[i : i + args.slots]
        width = max(len(r.prompt) for r in group)
        prompts_BP = torch.tensor([[0] * (width - len(r.prompt)) + r.prompt for r in group])
        mask_BP = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in group])
        start = time.perf_counter()
        hf_greedy(model, prompts_BP, mask_BP, max(r.new_tokens for r in group))
        clock = max(clock, group[-1].arrival_s) + time.perf_counter() - start
    return clock


def multi_turn_scenario(model: Qwen3ForCausalLM, args: argparse.Namespace) -> None:
    rng = torch.Generator().manual_seed(2)
    prompts = torch.randint(2, args.vocab, (args.rollouts, args.turn_prompt_len), generator=rng).tolist()
    observations = torch.randint(2, args.vocab, (args.turns, args.rollouts, args.obs_len), generator=rng).tolist()
    params = SamplingParams(temperature=0.0, max_tokens=args.turn_tokens, ignore_eos=True)

    def hf() -> list[list[int]]:
        contexts = torch.tensor(prompts)
        for turn in range(args.turns):
            sampled = torch.tensor(hf_greedy(model, contexts, torch.ones_like(contexts), args.turn_tokens))
            contexts = torch.cat([contexts, sampled, torch.tensor(observations[turn])], dim=1)
        return contexts.tolist()

    def ours(engine: Engine) -> Callable[[], list[list[int]]]:
        async def rollout(index: int) -> list[int]:
            context = list(prompts[index])
            for turn in range(args.turns):
                completion = await engine.generate(context, params)
                context += completion.token_ids_T + observations[turn][index]
            return context

        async def run() -> list[list[int]]:
            return list(await asyncio.gather(*(rollout(i) for i in range(args.rollouts))))

        return lambda: asyncio.run(run())

    config = EngineConfig(max_num_seqs=args.rollouts, torch_threads=args.threads, prefix_cache_slots=args.rollouts)
    with (
        Engine(model, config=config) as cached,
        Engine(model, config=config.model_copy(update={"prefix_cache_slots": 0})) as cold,
    ):
        best = interleaved_best({"hf": hf, "no prefix cache": ours(cold), "prefix cache": ours(cached)}, args.repeats)
    n_tokens = args.rollouts * args.turns * args.turn_tokens
    hf_s, hf_contexts = best["hf"]
    cells = []
    for name in ("no prefix cache", "prefix cache"):
        seconds, contexts = best[name]
        assert contexts == hf_contexts, f"{name}: greedy rollouts differ from HF's"
        cells.append(f"{name} {n_tokens / seconds:>6.0f} tok/s {hf_s / seconds:4.2f}x")
    print(
        f"multi-turn: {args.rollouts} rollouts x {args.turns} turns (prompt {args.turn_prompt_len}, {args.turn_tokens} "
        f"tokens + {args.obs_len}-token observation per turn): hf {n_tokens / hf_s:>6.0f} tok/s | " + " | ".join(cells)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads, for both")
    parser.add_argument("--requests", type=int, default=64, help="serving scenario: requests (0: skip it)")
    parser.add_argument("--slots", type=int, default=16, help="serving: our KV slots = HF's static batch size")
    parser.add_argument("--min-len", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=128)
    parser.add_argument("--gap-ms", type=float, default=10.0, help="serving: mean gap between arrivals")
    parser.add_argument("--rollouts", type=int, default=16, help="multi-turn scenario: agents (0: skip it)")
    parser.add_argument(
        "--turn-prompt-len", type=int, default=1024, help="multi-turn: first prompt (system + tool listing + task)"
    )
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=32, help="multi-turn: tokens sampled per turn")
    parser.add_argument("--obs-len", type=int, default=48, help="multi-turn: observation tokens after each turn")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)  # process-wide; the engine's worker sets the same
    spec = TinyModelSpec()
    model = build_tiny_model(spec, args.vocab, {"<|endoftext|>": 0, "<|im_end|>": 1})
    print(
        f"model: {spec.layers} layers, hidden {spec.hidden}, vocab {args.vocab}; prompt {args.prompt_len}, "
        f"new tokens {args.new_tokens}, threads {args.threads}; hf generate with use_cache=True"
    )
    for batch in args.batch:
        static_scenario(model, batch, args)
    if args.requests:
        requests = make_requests(args)
        n_tokens = sum(r.new_tokens for r in requests)
        hf_s = serve_hf_static(model, requests, args)
        ours = {name: serve_ours(model, requests, args, compile=name == "compiled") for name in ("eager", "compiled")}
        print(
            f"serving {args.requests} requests (lengths {args.min_len}-{args.max_len}, mean gap {args.gap_ms} ms, "
            f"{args.slots} slots): hf static padded batches {n_tokens / hf_s:.0f} tok/s ({hf_s:.2f} s) | "
            + " | ".join(
                f"{name} continuous batching {n_tokens / seconds:.0f} tok/s ({seconds:.2f} s) {hf_s / seconds:.2f}x"
                for name, seconds in ours.items()
            )
        )
    if args.rollouts:
        multi_turn_scenario(model, args)


if __name__ == "__main__":
    main()
