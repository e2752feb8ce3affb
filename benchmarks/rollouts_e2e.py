"""End-to-end rollouts/s: our engine over HTTP, the MCP harness and real tool calls, on the toy tasks.

The policy is served by `trainer.engine.server.create_app` (uvicorn in a thread on a free port) and driven by
`envs.harness.agent.run_group` through `CompletionsClient`; tools run either in-process (`envs.rollout.local_envs`)
or over stdio MCP in pooled sandboxes (`envs.rollout.pooled_envs`). Tasks come from `envs.build.build_environment`.
Tools are listed compactly (one line each, as the bootstrap renders them for small models). Policies: a tiny random
Qwen3 with a tokenizer trained on the task prompts and that tool listing (its rollouts are mostly one-turn garbage
answers, which still exercises every piece of machinery) and, if it is built (`recipe model bootstrap`), the
bootstrapped base under `models/base`, driven with the harness settings, apps and toy tasks it was trained for (its
sandboxes' gateways serve only those apps, so the prompt is the one the base knows).

Printed per (policy, envs): rollouts/s and sampled tokens/s over the wall clock of all groups in flight at once, and
the shares of the rollouts' summed time spent waiting on the engine (llm_s) vs on tools and grading (env_s).

    .venv/bin/python benchmarks/rollouts_e2e.py --tasks 8 --group 4 --max-tokens 64 [--compile] [--prefix-cache-slots 0]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from envs.apps import World
from envs.build import build_environment, load_tasks
from envs.harness.agent import AgentSetup, EnvsForTask, HarnessConfig, ToolListing, run_group
from envs.harness.chat import compact_system_prompt
from envs.harness.engine_client import CompletionsClient
from envs.harness.tools import LocalToolSession
from envs.net import serve_in_thread
from envs.rollout import local_envs, pooled_envs
from envs.sandbox.base import SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.types import TaskSpec, Trajectory
from trainer.bootstrap import BootstrapSpec, harness_config, load_cached, select_tasks
from trainer.engine import Engine, EngineConfig
from trainer.engine.server import create_app
from trainer.model import TinyModelSpec, bootstrap_policy, load_policy

BASE_MODELS = Path("models/base")
SERVED_NAME = "policy"


@contextmanager
def served(model: Qwen3ForCausalLM, tokenizer: PreTrainedTokenizerBase, config: EngineConfig) -> Iterator[str]:
    """The engine's HTTP server on a free local port, in a daemon thread; yields its base URL."""
    engine = Engine(model, tokenizer, config)
    try:
        with serve_in_thread(create_app(engine, SERVED_NAME)) as url:
            yield url
    finally:
        engine.close()


async def run_all(
    url: str,
    tasks: list[TaskSpec],
    factory: EnvsForTask,
    tokenizer: PreTrainedTokenizerBase,
    config: HarnessConfig,
    group: int,
) -> list[Trajectory]:
    async with CompletionsClient(url, SERVED_NAME, timeout_s=600) as client:
        groups = await asyncio.gather(
            *(
                run_group(task, factory(task), AgentSetup(client, tokenizer, config), group_id=f"bench-{i}", n=group)
                for i, task in enumerate(tasks)
            )
        )
    return [t for g in groups for t in g]


def report(label: str, trajectories: list[Trajectory], wall_s: float) -> None:
    n_tokens = sum(sum(t.loss_mask) for t in trajectories)
    llm_s, env_s = sum(t.llm_s for t in trajectories), sum(t.env_s for t in trajectories)
    errors = Counter(f"{t.stop_reason}/{t.error_class}" for t in trajectories if t.error_class is not None)
    calls = sum(len(t.tool_calls) for t in trajectories)
    print(
        f"{label:<28} {len(trajectories) / wall_s:7.2f} rollouts/s {n_tokens / wall_s:8.0f} tok/s  "
        f"llm {llm_s / max(llm_s + env_s, 1e-9):4.0%} env {env_s / max(llm_s + env_s, 1e-9):4.0%}  "
        f"({len(trajectories)} rollouts, {wall_s:.1f} s, {n_tokens} sampled tokens, {calls} tool calls, "
        f"error classes {dict(errors)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=8, help="tasks, spread over every world and tier")
    parser.add_argument("--group", type=int, default=4, help="rollouts per task (run_group n)")
    parser.add_argument("--max-tokens", type=int, default=64, help="max tokens per turn")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--slots", type=int, default=16, help="engine KV slots (max_num_seqs)")
    parser.add_argument("--per-world", type=int, default=4, help="warm sandboxes per world in the pool")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads of the engine")
    parser.add_argument("--context", type=int, default=4096, help="context budget (prompt + turns) in tokens")
    parser.add_argument("--compile", action="store_true", help="torch.compile the engine's decode step")
    parser.add_argument(
        "--prefix-cache-slots", type=int, default=EngineConfig().prefix_cache_slots, help="0: no prefix cache"
    )
    args = parser.parse_args()
    config = HarnessConfig(
        max_turns=args.max_turns,
        max_tokens_per_turn=args.max_tokens,
        context_budget_tokens=args.context,
        seed=0,
        tool_listing=ToolListing.COMPACT,
    )
    engine_config = EngineConfig(
        max_num_seqs=args.slots,
        torch_threads=args.threads,
        compile=args.compile,
        prefix_cache_slots=args.prefix_cache_slots,
    )
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        build_environment(data)
        worlds = data / "worlds"
        all_tasks = load_tasks(data)
        tasks = [all_tasks[i * len(all_tasks) // args.tasks] for i in range(args.tasks)]
        tools = asyncio.run(LocalToolSession(World(worlds / tasks[0].world_id)).list_tools())
        corpus = [compact_system_prompt(config.system_prompt, tools), *(t.prompt for t in all_tasks)]
        print(
            f"{len(tasks)} tasks x {args.group} rollouts, <= {args.max_turns} turns of <= {args.max_tokens} tokens; "
            f"engine compile={args.compile}, prefix cache slots {args.prefix_cache_slots}"
        )
        policies = [("tiny random", *bootstrap_policy(corpus, TinyModelSpec()), tasks, config, None)]
        spec = BootstrapSpec()
        base = load_cached(BASE_MODELS, spec, data)
        if base is None:
            print(f"no bootstrapped base under {BASE_MODELS} for this environment: run `recipe model bootstrap`")
        else:
            toy = select_tasks(all_tasks, spec)
            base_tasks = [toy[i * len(toy) // args.tasks] for i in range(args.tasks)]
            policies.append(("models/base", *load_policy(base.path), base_tasks, harness_config(spec), spec.apps))
        for name, model, tokenizer, policy_tasks, harness, apps in policies:
            with served(model, tokenizer, engine_config) as url:
                measure(name, url, policy_tasks, tokenizer, harness, worlds, apps, args)


def measure(
    name: str,
    url: str,
    tasks: list[TaskSpec],
    tokenizer: PreTrainedTokenizerBase,
    config: HarnessConfig,
    worlds: Path,
    apps: Sequence[str] | None,
    args: argparse.Namespace,
) -> None:
    """Report the policy's rollouts with in-process tools, then through stdio MCP gateways in pooled sandboxes
    (serving the same ``apps``, so the prompt is the same)."""
    started = time.perf_counter()
    trajs = asyncio.run(run_all(url, tasks, lambda task: local_envs(task, worlds, apps), tokenizer, config, args.group))
    report(f"{name}, local envs", trajs, time.perf_counter() - started)

    async def pooled() -> tuple[list[Trajectory], float]:
        provider = LocalProvider({t.world_id: worlds / t.world_id for t in tasks}, SandboxOptions(apps=apps))
        async with SandboxPool(provider, size_per_world=args.per_world) as pool:
            started = time.perf_counter()  # the pool's warm start is not part of a rollout
            trajs = await run_all(
                url, tasks, lambda task: pooled_envs(pool, task, worlds), tokenizer, config, args.group
            )
            return trajs, time.perf_counter() - started

    report(f"{name}, pooled stdio MCP", *asyncio.run(pooled()))


if __name__ == "__main__":
    main()
