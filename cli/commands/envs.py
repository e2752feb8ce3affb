"""``recipe envs``: build the environment content and check every oracle.

recipe envs generate [--out data] [--seed 0]    write every world and the train/held-out task sets
recipe envs check    [--data data] [--seed 0] [--transport python|inmemory|stdio]
                                                run every oracle on a private world copy and grade it (through
                                                the MCP gateway in pooled sandboxes with --transport stdio);
                                                prints a table per domain and tier, then "oracle solved N/N"
recipe envs check --environment FILE [--data data]
                                                a team's own environment (envs.byo): build it, start each MCP
                                                server on each world, send the user and schema probes; a table
                                                per server and per tool (exit 1 on any failure)
recipe envs check --tasks harbor:DIR|bundled-terminal [--sandbox local|docker]
                                                run Harbor's reference agents on every task folder: oracle
                                                (solution/solve.sh) must score 1, nop 0; prints each task's
                                                rewards and "valid N/N" (exit 1 when a task is invalid);
                                                --sandbox docker: in containers built from the tasks' images
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.args import seed, worlds_per_domain

if TYPE_CHECKING:
    from envs.types import TaskSpec

console = Console()


def _envs_generate(args: argparse.Namespace) -> int:
    from envs.build import build_environment

    manifest = build_environment(Path(args.out), seed=args.seed, worlds_per_domain=args.worlds_per_domain)
    table = Table(title=f"environment written to {args.out} in {manifest.generation_seconds:.2f} s")
    for column in ("domain", "tier", "split", "tasks"):
        table.add_column(column)
    for key, count in manifest.task_counts.items():
        table.add_row(*key.split("/"), str(count))
    console.print(table)
    console.print(f"worlds: {', '.join(manifest.world_ids)}; tasks: {sum(manifest.task_counts.values())}")
    return 0


def _harbor_tasks(spec: str) -> list[TaskSpec]:
    from envs.harness.terminal import bundled_terminal_tasks
    from envs.loaders import load_harbor_dir

    if spec == "bundled-terminal":
        return bundled_terminal_tasks()
    kind, _, folder = spec.partition(":")
    if kind != "harbor" or not folder:
        raise SystemExit(f"--tasks takes harbor:DIR or bundled-terminal, not {spec!r}")
    return load_harbor_dir(Path(folder))


def _envs_check_harbor(spec: str, sandbox: str) -> int:
    from envs.check import HarborProvider, check_harbor_tasks

    tasks = _harbor_tasks(spec)
    with Progress(
        TextColumn("oracle / nop"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        bar = progress.add_task("harbor", total=len(tasks))
        results = check_harbor_tasks(tasks, lambda _: progress.advance(bar), HarborProvider(sandbox))
    elapsed = sum(r.seconds for r in results)
    table = Table(title=f"Harbor reference agents on {spec} in {sandbox} sandboxes ({elapsed:.1f} s)")
    for column in ("task", "oracle", "nop", "seconds", "valid"):
        table.add_column(column)
    for result in results:
        verdict = "yes" if result.valid else "[red]INVALID[/red]"
        table.add_row(
            result.task_id, f"{result.oracle_reward:g}", f"{result.nop_reward:g}", f"{result.seconds:.2f}", verdict
        )
    console.print(table)
    for failure in (r for r in results if not r.valid):
        why = (
            failure.error or f"oracle scored {failure.oracle_reward:g} (needs 1), nop {failure.nop_reward:g} (needs 0)"
        )
        console.print(f"[red]INVALID[/red] {failure.task_id}: {why}")
    valid = sum(r.valid for r in results)
    print(f"valid {valid}/{len(results)}")
    return 0 if valid == len(results) else 1


def _envs_check_own(environment: Path, data: Path) -> int:
    """A team's environment: build it, start each server on each world, send the probes; a table per tool."""
    from envs.build import load_tasks
    from envs.byo.build import byo_environment_build
    from envs.check import OracleTransport, check_environment

    build = byo_environment_build(environment, data)
    tasks = load_tasks(build)
    checked = check_environment(tasks, build / "worlds", transport=OracleTransport.STDIO)
    servers = Table(title=f"MCP servers of {environment} (build {build})")
    for column in ("world", "server", "tools", "seconds", "started"):
        servers.add_column(column)
    for server in checked.servers:
        verdict = "yes" if server.error is None else f"[red]NO[/red]: {server.error}"
        servers.add_row(server.world_id, server.server, str(server.tools), f"{server.seconds:.2f}", verdict)
    console.print(servers)
    by_tool: dict[str, list[tuple[bool, bool, bool]]] = defaultdict(list)
    for probe in checked.probes:
        record = probe.record
        by_tool[record.tool].append((probe.known_good, record.ok, record.error_class == "timeout"))
    probes = Table(title="probes (known-good: user probes and schema probes with every required argument known)")
    for column in ("tool", "probes", "known-good", "known-good failed", "timed out"):
        probes.add_column(column)
    for tool, rows in sorted(by_tool.items()):
        failed = sum(good and not ok for good, ok, _ in rows)
        timed_out = sum(late for *_, late in rows)
        cells = (str(len(rows)), str(sum(good for good, *_ in rows)), str(failed), str(timed_out))
        probes.add_row(tool, *(f"[red]{c}[/red]" if c != "0" and i >= 2 else c for i, c in enumerate(cells)))
    console.print(probes)
    for probe in (p for p in checked.probes if p.known_good and not p.record.ok):
        console.print(f"[red]FAILED[/red] {probe.record.tool} on {probe.world_id}: {probe.record.error}")
    problems = sum(s.error is not None for s in checked.servers)
    problems += sum((p.known_good and not p.record.ok) or p.record.error_class == "timeout" for p in checked.probes)
    oracles = (
        f"; oracle solved {sum(r.passed for r in checked.oracles)}/{len(checked.oracles)}" if checked.oracles else ""
    )
    print(f"{len(tasks)} tasks; {len(checked.probes)} probes; {problems} problems{oracles}")
    return 0 if problems == 0 and all(r.passed for r in checked.oracles) else 1


def _envs_check(args: argparse.Namespace) -> int:
    import time

    if args.environment:
        return _envs_check_own(Path(args.environment), Path(args.data))
    if args.tasks:
        return _envs_check_harbor(args.tasks, args.sandbox)
    if args.sandbox != "local":
        raise SystemExit("--sandbox applies to Harbor tasks (--tasks); the oracle check picks its with --transport")

    from envs.build import ensure_environment, load_tasks
    from envs.check import OracleTransport, check_environment

    data = Path(args.data)
    manifest = ensure_environment(data, seed=args.seed)
    tasks = load_tasks(data)
    started = time.perf_counter()
    with Progress(
        TextColumn("oracle"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        bar = progress.add_task("oracle", total=len(tasks))
        results = check_environment(
            tasks, data / "worlds", on_result=lambda _: progress.advance(bar), transport=OracleTransport(args.transport)
        ).oracles
    elapsed = time.perf_counter() - started

    cells: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for result in results:
        cells[(result.domain, result.tier)].append(result.passed)
    table = Table(title=f"oracle check via {args.transport} ({len(manifest.world_ids)} worlds, {elapsed:.1f} s)")
    for column in ("domain", "tier", "solved", "tasks"):
        table.add_column(column)
    for (domain, tier), passed in sorted(cells.items()):
        table.add_row(domain, tier, str(sum(passed)), str(len(passed)))
    console.print(table)
    for failure in (r for r in results if not r.passed):
        console.print(f"[red]FAILED[/red] {failure.task_id}: {failure.error}")
    solved = sum(r.passed for r in results)
    print(f"oracle solved {solved}/{len(results)}")
    return 0 if solved == len(results) else 1


def register(commands: argparse._SubParsersAction) -> None:
    envs = commands.add_parser("envs", help="worlds, tasks and oracle checks").add_subparsers(
        dest="envs_command", required=True, help="what to do with the environments"
    )
    generate = envs.add_parser("generate", help="write worlds and task sets")
    generate.add_argument(
        "--out", default="data", help="a new or empty folder, or one rl-recipe wrote before (default: data)"
    )
    generate.add_argument("--seed", type=seed, default=0, help="seed of the world and task generators (default: 0)")
    generate.add_argument(
        "--worlds-per-domain",
        type=worlds_per_domain,
        default=3,
        help="3 to 1000; world 3 is held out, 1, 2 and 4+ train (default: 3)",
    )
    generate.set_defaults(handler=_envs_generate)

    check = envs.add_parser("check", help="run and grade every oracle")
    check.add_argument("--data", default="data", help="data folder; generated when missing (default: data)")
    check.add_argument("--seed", type=seed, default=0, help="seed of the environment to build when missing")
    check.add_argument(
        "--transport",
        choices=["python", "inmemory", "stdio"],
        default="python",
        help="python: apps called directly; inmemory / stdio: through the MCP gateway (stdio in pooled sandboxes)",
    )
    check.add_argument(
        "--environment",
        default=None,
        help="a team's own environment file (or its folder): start its MCP servers on each world and send its probes",
    )
    check.add_argument(
        "--tasks",
        default=None,
        help="harbor:DIR or bundled-terminal: check Harbor task folders with the oracle and nop agents instead",
    )
    check.add_argument(
        "--sandbox",
        choices=["local", "docker"],
        default="local",
        help="with --tasks: local (bubblewrap) or docker (a container from each task's image; default: local)",
    )
    check.set_defaults(handler=_envs_check)
