"""``recipe cluster``: a cluster profile's hero run as SkyRL overrides, submitted to a Ray cluster; the engines' spec.

recipe cluster render --profile qwen36-35b [--arm NAME] [--storage PATH] [--set KEY=VALUE ...]
    prints the SkyRL 0.3.x overrides of the profile's hero run (the ablations' landed arm, by default the recipe's
    prior ``dppo_prompt_mean_nudge``), one ``key=value`` per line, sorted. Writes nothing.
recipe cluster submit --profile P --address http://HOST:8265 [--dry-run] [--timeout S] [--env KEY=VALUE ...]
                      [--catalog PATH] [--python PY] [render flags]
    submits the run as a Ray Job (the repository as working dir), streams its log, and prints the final status and
    the train steps read from its metrics; ``--catalog`` appends them to that catalog's ``train_steps`` table.
    ``--dry-run`` runs ``trainer.skyrl.dryrun`` instead of SkyRL: it checks the overrides and prints metric blocks
    computed from the config, so the whole path runs on a CPU-only cluster. Exit 0 when the job succeeded, 1 when
    it failed or timed out.
recipe cluster engine --profile P [--host H] [--port N] [--token-file F]
    prints the line that serves one of the profile's engines — vLLM behind its gate (``trainer.vllm.gate``), loopback
    unless --host — its RL control routes, and the ``--set`` overrides that point our harness at it. Every route wants
    the token in F (default ``.cluster/engine-token``; made, mode 0600, when missing).
recipe cluster up --profile cluster-cpu [--set KEY=VALUE ...]
    starts the one-machine Ray cluster the profile describes (``cluster.local``: a head and its workers as separate
    ``ray start`` processes with their own resources; the dashboard on ``cluster.ray_address``'s port); its state goes
    to ``.cluster/<profile>/cluster.json``. Returns once every node is alive.
recipe cluster down --profile cluster-cpu
    stops that cluster: every process it started, and nothing else (jobs and engines on it end with it).
recipe cluster status --profile P
    the cluster's alive nodes and their resources, and every job it knows (id, status, entry point).

A profile without a cluster section or hub/folder policy, an unknown arm, a setting SkyRL cannot express or an
unreachable cluster ends with one ``recipe: error:`` line and exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cli.args import port, positive_float
from envs.errors import RecipeError

if TYPE_CHECKING:
    from flows.config import RecipeConfig
    from trainer.skyrl.render import SkyRLRun


class ClusterError(RecipeError, ValueError):
    """A profile or flag that cannot make a cluster run."""


def skyrl_run(config: RecipeConfig, arm: str | None = None, storage: str | None = None) -> SkyRLRun:
    """The profile's hero run with the ablation arm ``arm`` (default: the recipe's prior) as a ``SkyRLRun``."""
    from flows.config import PolicySource
    from flows.skyrl_jobs import base_model, planned_loops, skyrl_run_for
    from trainer.skyrl.render import DEFAULT_STORAGE

    if config.cluster is None:
        raise ClusterError(f"profile {config.profile!r} has no cluster section (try qwen36-35b or qwen35-397b)")
    if config.policy.source is PolicySource.BOOTSTRAP:
        raise ClusterError(f"profile {config.profile!r}: a cluster run needs policy.source hub or folder")
    ablations = config.stages.ablations
    name = arm or ablations.prior
    if name not in ablations.arms:
        raise ClusterError(f"no ablation arm {name!r}; arms are: {', '.join(sorted(ablations.arms))}")
    _, loop = planned_loops(config, hero_arm=name)[f"hero-{name}"]
    return skyrl_run_for(
        config,
        loop,
        name=f"{config.profile}-hero-{name}",
        model=base_model(config),
        storage=storage or f"{DEFAULT_STORAGE}/{config.profile}",
        stage="hero",
        arm=name,
    )


def _run(args: argparse.Namespace) -> SkyRLRun:
    from flows.config import load_profile

    return skyrl_run(load_profile(args.profile, args.set), args.arm, args.storage)


def _render(args: argparse.Namespace) -> int:
    from trainer.skyrl.render import render

    print("\n".join(render(_run(args)).lines()))
    return 0


def _key_values(pairs: list[str], flag: str) -> dict[str, str]:
    found = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ClusterError(f"{flag} {pair!r} is not KEY=VALUE")
        found[key] = value
    return found


def _submit(args: argparse.Namespace) -> int:
    from trainer.skyrl.render import render
    from trainer.skyrl.submit import DRY_RUN_MODULE, ENTRY_MODULE, submit_job

    run = _run(args)
    overrides = render(run).lines()
    module = DRY_RUN_MODULE if args.dry_run else ENTRY_MODULE
    label = f"{run.name}-dryrun" if args.dry_run else run.name
    outcome = submit_job(
        args.address,
        overrides,
        module=module,
        python=args.python,
        env_vars=_key_values(args.env, "--env"),
        timeout_s=args.timeout,
        echo=lambda text: print(text, end="", flush=True),
        run=label,
    )  # fmt: skip
    print(f"\njob {outcome.job_id}: {outcome.status}; {len(outcome.rows)} train steps read from its metrics")
    if args.catalog and outcome.rows:
        from tasks.catalog import Catalog

        Catalog(args.catalog).append("train_steps", outcome.rows)
        print(f"appended {len(outcome.rows)} rows to {args.catalog} (train_steps, stage hero, run {label})")
    return 0 if outcome.succeeded else 1


def _engine(args: argparse.Namespace) -> int:
    from envs.tokens import ensure_token_file
    from trainer.vllm.launch import ROUTES, vllm_serve_spec

    run = _run(args)
    ensure_token_file(args.token_file)
    try:
        spec = vllm_serve_spec(
            run.model,
            tensor_parallel=run.layout.engine_tensor_parallel,
            max_model_len=run.max_model_len,
            gpu_memory_utilization=run.layout.gpu_memory_utilization,
            max_num_seqs=run.layout.max_num_seqs,
            host=args.host,
            port=args.port,
            served_model_name=run.served_model_name,
            seed=run.seed,
            token_file=args.token_file.resolve(),
        )
    except ValueError as error:
        raise ClusterError(str(error)) from None
    print(spec.command())
    print(f'\nroutes (each wants the header "Authorization: Bearer $(cat {args.token_file})"):')
    for name, route in ROUTES.items():
        print(f"  {name:<22} {route.method:<5} {spec.base_url}{route.target()}")
    print("\nour harness on this engine: --set " + " --set ".join(spec.harness_overrides()))
    return 0


def _local_cluster(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The profile's one-machine cluster (``cluster.local``), its state under ``.cluster/<profile>/``."""
    from urllib.parse import urlparse

    from flows.config import ClusterIsolation, load_profile
    from flows.placement.base import REPO_ROOT, repo_path
    from trainer.cluster.local_cluster import LocalCluster, LocalNode

    config = load_profile(args.profile, args.set)
    cluster = config.cluster
    if cluster is None or cluster.local is None or not cluster.ray_address:
        raise ClusterError(
            f"profile {config.profile!r} describes no cluster on this machine (cluster.local and cluster.ray_address; "
            "see deployments/profiles/cluster-cpu.yaml)"
        )
    port = urlparse(cluster.ray_address).port or 8265
    nodes = [LocalNode(n.num_cpus, dict(n.resources), n.num_gpus) for n in cluster.local.workers]
    head = LocalNode(cluster.local.head.num_cpus, dict(cluster.local.head.resources), cluster.local.head.num_gpus)
    root = REPO_ROOT / ".cluster" / config.profile
    python = repo_path(cluster.python)
    namespace = f"rl-recipe-{config.profile}" if cluster.local.isolation is ClusterIsolation.NETNS else None
    return LocalCluster(
        root,
        dashboard_port=port,
        gcs_port=cluster.local.gcs_port,
        workers=nodes,
        head=head,
        python=python,
        namespace=namespace,
        engine_ports=cluster.local.engine_ports,
    )


def _up(args: argparse.Namespace) -> int:
    import time

    cluster = _local_cluster(args)
    tick = time.monotonic()
    state = cluster.start()
    print(f"cluster up in {time.monotonic() - tick:.0f} s: {len(state.pids)} nodes, dashboard {state.dashboard}")
    if state.netns:
        print(f"its nodes listen in the network namespace {state.netns}, mirrored onto this machine's loopback only")
    else:
        print("warning: its nodes listen on this machine's network (cluster.local.isolation none): a token guards them")
    print(f"every request wants its token: {state.token_file} (Authorization: Bearer ...)")
    print(f"stop it with: recipe cluster down --profile {args.profile}")
    return 0


def _down(args: argparse.Namespace) -> int:
    cluster = _local_cluster(args)
    cluster.stop()
    print("cluster stopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    from flows.config import load_profile
    from flows.placement import cluster_token_file
    from trainer.cluster.jobs import RayJobs, ray_token
    from trainer.cluster.local_cluster import alive_nodes

    config = load_profile(args.profile, args.set)
    if config.cluster is None or not config.cluster.ray_address:
        raise ClusterError(f"profile {config.profile!r} names no cluster (cluster.ray_address)")
    address, token_file = config.cluster.ray_address, cluster_token_file(config)
    nodes = alive_nodes(address, ray_token(token_file) if token_file is None or token_file.is_file() else None)
    print(f"{address}: {len(nodes)} alive node(s)")
    for node in nodes:
        print(f"  {node['node_id'][:12]}  {node['resources']}")
    for job in RayJobs(address, token_file=token_file if token_file and token_file.is_file() else None).listing():
        print(f"  job {job['submission_id']}  {job['status']:<9}  {job['entrypoint']}")
    return 0


def _render_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", required=True, help="a cluster profile name or path (qwen36-35b, qwen35-397b)")
    parser.add_argument("--arm", help="the ablation arm to run (default: the profile's stages.ablations.prior)")
    parser.add_argument("--storage", help="shared path or s3:// / gs:// URI for checkpoints, logs and data")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change a profile value")


def register(commands: argparse._SubParsersAction) -> None:
    cluster = commands.add_parser(
        "cluster", help="Ray clusters: a local one (up, down, status), SkyRL overrides, submission, an engine's spec"
    )
    sub = cluster.add_subparsers(dest="cluster_command", required=True, help="what to do on the cluster")
    render = sub.add_parser("render", help="print the SkyRL overrides of a profile's hero run")
    _render_flags(render)
    render.set_defaults(handler=_render)
    submit = sub.add_parser("submit", help="submit the run as a Ray Job, stream its log, read its metrics")
    _render_flags(submit)
    submit.add_argument("--address", required=True, help="the Ray dashboard, http://HOST:8265")
    submit.add_argument("--dry-run", action="store_true", help="run the checking stand-in instead of SkyRL")
    submit.add_argument("--timeout", type=positive_float, default=3600.0, help="seconds before the job is stopped")
    submit.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="job environment variable")
    submit.add_argument("--python", default="python", help="the interpreter on the cluster (default: python)")
    submit.add_argument("--catalog", type=Path, help="append the job's train steps to this catalog.duckdb")
    submit.set_defaults(handler=_submit)
    engine = sub.add_parser("engine", help="print the vllm serve line and RL routes of one engine")
    _render_flags(engine)
    engine.add_argument("--host", default="127.0.0.1", help="listen address (default: loopback)")
    engine.add_argument("--port", type=port, default=8000, help="the port the engine listens on")
    engine.add_argument(
        "--token-file", type=Path, default=Path(".cluster/engine-token"), help="the engine's token (made if missing)"
    )
    engine.set_defaults(handler=_engine)
    for name, handler, what in (
        ("up", _up, "start the profile's one-machine Ray cluster (cluster.local)"),
        ("down", _down, "stop the profile's one-machine Ray cluster"),
        ("status", _status, "the cluster's nodes and jobs"),
    ):
        command = sub.add_parser(name, help=what)
        command.add_argument("--profile", required=True, help="a profile with a cluster section (cluster-cpu)")
        command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change a profile value")
        command.set_defaults(handler=handler)


if __name__ == "__main__":
    from cli.main import main

    sys.exit(main(["cluster", *sys.argv[1:]]))
