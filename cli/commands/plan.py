"""``recipe plan``: the sizing plan of a cluster run — memory per GPU, KV capacity, concurrency ceilings.

recipe plan --profile qwen36-35b [--config path/to/config.json] [layout and knob flags]
recipe plan --config path/to/config.json [layout and knob flags]
    reads the model's Hugging Face config.json (--config, else the profile's cluster.hf_config), the profile's
    cluster layout, rollout knobs and train context (each flag overrides its profile value; without a profile: one
    engine and one train node of 8 GPUs, the schema's rollout defaults), and prints the plan as a table
    (trainer.sizing.cluster_plan): parameters, Megatron memory per train GPU under TP/EP/PP, engine weights and KV
    capacity, the systems and algorithmic ceilings and the concurrency, then the resource ledger (``flows.ledger``: per
    phase, which processes hold which GPUs and CPUs), and whether it all fits. With measured
    throughputs (--gen-per-node and --train-per-node, trajectories/s per node) it also prints the inference:train
    split that keeps the trainer's idle share ≈ 0 (trainer.sizing.node_split). Writes nothing. Exit 0 when the plan
    fits, 1 when it does not, 2 for a missing or invalid config.json or profile.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.args import positive_float, positive_int
from flows.layout import PlanError, cluster_layout

if TYPE_CHECKING:
    pass

REPO_ROOT = Path(__file__).resolve().parents[2]
REQUIRED_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


def resolve(path: Path) -> Path:
    """A relative path from the working directory when it exists there, else from the repository root."""
    if path.is_absolute() or path.exists() or not (REPO_ROOT / path).exists():
        return path
    return REPO_ROOT / path


def read_model_config(path: Path) -> dict[str, Any]:
    """A HF ``config.json`` as a dict, with the keys the planner needs (``PlanError`` naming the file otherwise)."""
    from trainer.sizing import text_config

    try:
        raw = json.loads(path.read_text())
    except OSError as error:
        raise PlanError(
            f"cannot read model config {path}: {error.strerror}; pass --config path/to/config.json"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PlanError(f"model config {path} is not valid JSON: {error}") from None
    if not isinstance(raw, dict):
        raise PlanError(f"model config {path} is not a JSON object (a Hugging Face config.json)")
    missing = [key for key in REQUIRED_KEYS if key not in text_config(raw)]
    if missing:
        raise PlanError(f"model config {path} lacks {', '.join(missing)}: not a decoder's config.json")
    return raw


def _knobs(args: argparse.Namespace, config: Any) -> dict[str, int]:
    from envs.harness.agent import HarnessConfig
    from flows.config import RolloutSection

    rollout = config.rollout if config is not None else RolloutSection()
    harness = HarnessConfig(**(config.harness if config is not None else {}))
    knobs = {
        "trajectory_tokens": harness.context_budget_tokens,
        "max_staleness": rollout.max_staleness,
        "prompts_per_step": rollout.prompts_per_step,
        "samples_per_prompt": rollout.samples_per_prompt,
    }
    return knobs | {name: getattr(args, name) for name in knobs if getattr(args, name) is not None}


def table(rows: list[tuple[str, str, str]], header: tuple[str, str, str] = ("quantity", "value", "how")) -> str:
    """Rows as an aligned text table: each column as wide as its widest cell, two spaces apart."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [header, tuple("-" * w for w in widths), *rows]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines)


def _plan(args: argparse.Namespace) -> int:
    from flows.config import load_profile
    from trainer.sizing import cluster_plan, node_split, trainer_idle_share

    if (args.gen_per_node is None) != (args.train_per_node is None):
        raise PlanError("--gen-per-node and --train-per-node go together (measured trajectories/s per node)")
    if args.gen_per_node is not None and min(args.gen_per_node, args.train_per_node) <= 0:
        raise PlanError("--gen-per-node and --train-per-node are measured trajectories/s per node: both above 0")
    config = load_profile(args.profile) if args.profile else None
    path = args.config or (config.cluster.hf_config if config is not None and config.cluster is not None else None)
    if path is None:
        where = f"profile {args.profile!r} names no cluster.hf_config" if args.profile else "no profile given"
        raise PlanError(f"{where}; pass --config path/to/config.json (the model's Hugging Face config.json)")
    path = resolve(Path(path))
    model = read_model_config(path)
    flags = {name: getattr(args, name) for name in LAYOUT_FLAGS if getattr(args, name) is not None}
    layout = cluster_layout(config, **flags)
    knobs = _knobs(args, config)
    try:
        plan = cluster_plan(model, layout, **knobs)
    except (TypeError, ValueError) as error:
        raise PlanError(f"cannot plan {path}: {error}") from None

    name = config.policy.hub_id if config is not None and config.policy.hub_id else path.name
    print(f"plan of {name} ({path}){f' on profile {args.profile}' if args.profile else ''}")
    print(table(plan.rows()))
    wanted = config.rollout.max_concurrency if config is not None else None
    if wanted is not None and wanted > plan.concurrency:
        print(
            f"note: rollout.max_concurrency {wanted} > planned concurrency {plan.concurrency}: the engines hold "
            f"{wanted} trajectories while they average ≤ {plan.trajectory_tokens_at(wanted):,} tokens, else preempt"
        )
    if args.gen_per_node is not None:
        total = layout.inference_nodes + layout.train_nodes
        now = trainer_idle_share(layout.inference_nodes, layout.train_nodes, args.gen_per_node, args.train_per_node)
        split = node_split(total, args.gen_per_node, args.train_per_node)
        print(
            f"node split of {total} nodes for trainer idle ≈ 0: {split.inference_nodes} inference : "
            f"{split.train_nodes} train (idle share {split.trainer_idle_share:.0%}; now "
            f"{layout.inference_nodes}:{layout.train_nodes}, idle share {now:.0%})"
        )
    balances = _print_ledger(config, flags)
    fits = plan.fits and balances
    print(f"plan {'fits' if fits else 'does NOT fit'}")
    return 0 if fits else 1


def _print_ledger(config: Any, flags: dict[str, Any]) -> bool:
    """The profile's resource ledger (``flows.ledger``) on the layout as flagged; whether every phase fits."""
    from flows.ledger import run_ledger

    if config is None or config.cluster is None:
        return True
    cluster = config.cluster.model_copy(
        update={k: v for k, v in flags.items() if k in type(config.cluster).model_fields}
    )
    ledger = run_ledger(config.model_copy(update={"cluster": cluster}))
    assert ledger is not None  # a cluster section gives one
    print("\n".join(ledger.lines()))
    return not ledger.shortfalls()


LAYOUT_FLAGS = {
    "gpus_per_node": (int, "GPUs per node"),
    "gpu_memory_gib": (float, "memory of one GPU, GiB"),
    "gpu_memory_utilization": (float, "share of an engine GPU vLLM may use"),
    "inference_nodes": (int, "nodes of the vLLM engines"),
    "engines": (int, "vLLM engines"),
    "engine_tensor_parallel": (int, "TP of one engine"),
    "max_num_seqs": (int, "sequences one engine decodes together"),
    "train_nodes": (int, "Megatron nodes"),
    "tensor_parallel": (int, "Megatron TP"),
    "expert_parallel": (int, "Megatron EP"),
    "pipeline_parallel": (int, "Megatron PP"),
    "context_parallel": (int, "Megatron CP"),
}
SHORT = {"engine_tensor_parallel": "engine-tp", "tensor_parallel": "tp", "expert_parallel": "ep",
         "pipeline_parallel": "pp", "context_parallel": "cp"}  # fmt: skip
KNOB_FLAGS = {
    "trajectory_tokens": "tokens of one trajectory (default: the train context, harness.context_budget_tokens)",
    "max_staleness": "S of the algorithmic ceiling (default: rollout.max_staleness)",
    "prompts_per_step": "B (default: rollout.prompts_per_step)",
    "samples_per_prompt": "n (default: rollout.samples_per_prompt)",
}


def register(commands: argparse._SubParsersAction) -> None:
    plan = commands.add_parser(
        "plan", help="size a cluster run: memory per GPU, KV capacity, concurrency, and whether it fits"
    )
    plan.add_argument("--profile", help="a profile name or path with a cluster section (qwen36-35b, qwen35-397b)")
    plan.add_argument(
        "--config", help="the model's Hugging Face config.json (default: the profile's cluster.hf_config)"
    )
    layout = plan.add_argument_group("layout (default: the profile's cluster section)")
    for name, (kind, text) in LAYOUT_FLAGS.items():
        flags = [f"--{name.replace('_', '-')}", *([f"--{SHORT[name]}"] if name in SHORT else [])]
        layout.add_argument(*flags, dest=name, type=kind, help=text)
    knobs = plan.add_argument_group("knobs (default: the profile's)")
    for name, text in KNOB_FLAGS.items():
        knobs.add_argument(f"--{name.replace('_', '-')}", dest=name, type=positive_int, help=text)
    split = plan.add_argument_group("node split (measured throughputs)")
    split.add_argument("--gen-per-node", type=positive_float, help="generation: trajectories/s per inference node")
    split.add_argument("--train-per-node", type=positive_float, help="training: trajectories/s per train node")
    plan.set_defaults(handler=_plan)
