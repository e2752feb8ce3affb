"""De-risk tasks: oracles and probes through the real gateway, the base's rollouts, and the per-tool analysis.

Everything measured lands in the run's catalog first (``oracle``, ``tool_calls``, ``trajectories``); the analysis
then reads it back with DuckDB group-bys, so the numbers in the gate report are the catalog's, not a second tally.

* ``check_environment_task`` — every task's oracle and every tool probe (``envs.check``), through the MCP gateway in
  pooled stdio sandboxes, known-bad variants included when the profile names them;
* ``base_rollouts`` — ``samples`` rollouts of each train task by the base policy, each in a pooled sandbox whose
  gateway serves the policy's apps;
* ``tool_stats`` / ``error_signatures`` / ``reward_variance`` / ``rollout_errors`` — the SQL over the catalog.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from envs.check import OracleTransport, check_environment
from envs.diagnostics import ADVICE_BY_SIGNATURE, ToolStats
from envs.harness.agent import AgentSetup, run_group
from envs.harness.parsing import MISMATCH
from envs.mcp.variants import BadVariant
from envs.rollout import pooled_envs
from envs.sandbox.base import SandboxOptions
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from envs.types import TaskSpec, ToolCallRecord, Trajectory
from tasks.artifacts import ProgressArtifact, log
from tasks.catalog import Catalog, tool_call_row
from tasks.context import RolloutJob, StageScope
from tasks.engine import rollout_engine

ORACLE, PROBE, SCHEMA_PROBE, BASE = "oracle", "probe", "schema-probe", "base-rollouts"
KNOWN_GOOD = (ORACLE, PROBE)
"""Sources whose tool arguments are right by construction: a failure there is the tool's. A schema probe that needed
placeholder arguments (``envs.byo.probes``) is not: it counts towards timeouts and empty answers only."""


@task(name="oracle-check", cache_policy=NO_CACHE)
def check_environment_task(
    scope: StageScope, tasks: Sequence[TaskSpec], transport: OracleTransport, variants: Sequence[BadVariant]
) -> dict[str, Any]:
    """Run every oracle and probe; record them; return solved / total and each failed oracle's task and error."""
    by_id = {t.task_id: t for t in tasks}
    with ProgressArtifact(scope.folder, "oracle-progress", total=len(tasks)) as progress:
        checked = check_environment(
            tasks,
            scope.worlds,
            on_result=lambda r: progress.advance(r.task_id, by=1),
            transport=transport,
            variants=frozenset(variants),
        )
    stage = scope.stage
    scope.catalog.append(
        "oracle",
        [
            {"stage": stage, "task_id": r.task_id, "world_id": by_id[r.task_id].world_id, "domain": r.domain}
            | {"tier": r.tier, "split": r.split, "passed": r.passed, "score": r.score, "seconds": r.seconds}
            | {"error": r.error}
            for r in checked.oracles
        ],
    )
    calls = [
        tool_call_row(stage, ORACLE, r.task_id, by_id[r.task_id].world_id, call)
        for r in checked.oracles
        for call in r.tool_calls
    ]
    calls += [
        tool_call_row(stage, PROBE if p.known_good else SCHEMA_PROBE, None, p.world_id, p.record)
        for p in checked.probes
    ]
    scope.catalog.append("tool_calls", calls)
    solved = sum(r.passed for r in checked.oracles)
    log("oracle solved %d/%d; %d probe calls", solved, len(checked.oracles), len(checked.probes))
    for server in checked.servers:
        log("MCP server %s on %s: %s", server.server, server.world_id, server.error or f"{server.tools} tools")
    failed = [
        {"task_id": r.task_id, "error": r.error or f"graded {r.score:g}"} for r in checked.oracles if not r.passed
    ]
    return {
        "solved": solved,
        "tasks": len(checked.oracles),
        "probes": len(checked.probes),
        "known_good_probes": sum(p.known_good for p in checked.probes),
        "failed_probes": sorted(
            {p.record.tool for p in checked.probes if (p.known_good and not p.record.ok) or _timed_out(p.record)}
        ),
        "failed": failed,
        "servers": [asdict(server) for server in checked.servers],
    }


def _timed_out(record: ToolCallRecord) -> bool:
    return record.error_class == "timeout"


def unusable_own_environment(checked: dict[str, Any]) -> str | None:
    """Why a team's own environment (``check_environment_task``'s result) cannot be rolled out on — a server that does
    not start, a known-good probe that fails or a probe that times out — or None (and always None for ours)."""
    if failed := [row["server"] for row in checked["servers"] if row["error"]]:
        return f"MCP server(s) {', '.join(sorted(set(failed)))} do not start"
    if checked["servers"] and checked["failed_probes"]:
        return f"probes of {', '.join(checked['failed_probes'])} fail or time out"
    return None


async def _rollouts(
    job: RolloutJob,
    worlds_root: Path,
    pool_per_world: int,
    options: SandboxOptions,
    on_group: Callable[[list[Trajectory]], None],
) -> None:
    worlds = {t.world_id: worlds_root / t.world_id for t in job.tasks}
    provider = LocalProvider(worlds, options)
    async with (
        SandboxPool(provider, size_per_world=pool_per_world) as pool,
        rollout_engine(job.policy_dir, job.engine, options.faults) as client,
    ):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(job.policy_dir)

        async def one(index: int, task: TaskSpec) -> None:
            envs = pooled_envs(pool, task, worlds_root)
            agent = AgentSetup(client, tokenizer, job.harness(index))
            group = await run_group(task, envs, agent, group_id=f"base-{task.task_id}", n=job.samples)
            on_group(group)

        await asyncio.gather(*(one(i, task) for i, task in enumerate(job.tasks)))


@task(name="base-rollouts", cache_policy=NO_CACHE)
def base_rollouts(scope: StageScope, job: RolloutJob, pool_per_world: int, variants: Sequence[BadVariant]) -> int:
    """``samples`` rollouts of every task by the base policy through pooled gateway sandboxes; all into the catalog,
    those an (injected, ``scope.faults``) infra fault ended with their error class."""
    by_id = job.by_id()
    options = SandboxOptions(apps=job.settings.apps, variants=frozenset(variants), faults=scope.faults)
    written = 0
    with ProgressArtifact(scope.folder, "rollout-progress", total=len(job.tasks)) as progress:

        def on_group(group: list[Trajectory]) -> None:
            nonlocal written
            written += len(scope.catalog.add_trajectories(scope.stage, BASE, "base", group, by_id))
            progress.advance(group[0].task_id if group else "")

        asyncio.run(_rollouts(job, scope.worlds, pool_per_world, options, on_group))
    return written


TOOL_STATS_SQL = """
WITH calls AS (SELECT * FROM tool_calls WHERE stage = $stage),
everything AS (
    SELECT tool, count(*) AS calls,
           sum(CASE WHEN ok AND returned_empty THEN 1 ELSE 0 END)::DOUBLE / nullif(sum(ok::INT), 0) AS empty_rate,
           avg(timed_out::INT) AS timeout_rate
    FROM calls GROUP BY tool),
known AS (
    SELECT tool, avg(1 - ok::INT) AS failure_rate, mode(error_class) FILTER (WHERE NOT ok) AS top_signature
    FROM calls WHERE source IN ('oracle', 'probe') GROUP BY tool),
model AS (SELECT tool, avg(1 - ok::INT) AS model_failure_rate FROM calls WHERE source = 'base-rollouts' GROUP BY tool),
last_call AS (SELECT task_id, arg_max(tool, turn) AS tool FROM calls WHERE source = 'oracle' GROUP BY task_id),
blame AS (  -- a failed oracle is blamed on the last tool it called: its run stops at the call that went wrong
    SELECT o.task_id, o.passed, l.tool FROM oracle o LEFT JOIN last_call l USING (task_id) WHERE o.stage = $stage),
oracle_tools AS (SELECT DISTINCT task_id, tool FROM calls WHERE source = 'oracle'),
oracle_rate AS (
    SELECT t.tool, 1 - (count(*) FILTER (WHERE NOT b.passed AND b.tool = t.tool))::DOUBLE / count(*) AS oracle_pass_rate
    FROM oracle_tools t JOIN blame b USING (task_id) GROUP BY t.tool)
SELECT e.tool, e.calls, k.failure_rate, k.top_signature, e.empty_rate, e.timeout_rate, r.oracle_pass_rate,
       m.model_failure_rate
FROM everything e LEFT JOIN known k USING (tool) LEFT JOIN model m USING (tool) LEFT JOIN oracle_rate r USING (tool)
ORDER BY e.tool"""


def tool_stats(catalog: Catalog, stage: str) -> list[ToolStats]:
    """Per-tool rates over the stage's calls (see ``envs.diagnostics.ToolStats`` for each denominator)."""
    rows = catalog.query(TOOL_STATS_SQL, {"stage": stage})
    return [ToolStats(**row) for row in rows]


def error_signatures(catalog: Catalog, stage: str, top: int = 10) -> list[dict[str, Any]]:
    """The most frequent error signatures of failed calls, by source, with their tools and the advice."""
    rows = catalog.query(
        """SELECT error_class AS signature, source, count(*) AS calls, string_agg(DISTINCT tool, ', ') AS tools,
                  any_value(error) AS example
           FROM tool_calls WHERE stage = ? AND NOT ok GROUP BY error_class, source ORDER BY calls DESC LIMIT ?""",
        [stage, top],
    )
    for row in rows:
        known_good = row["source"] in KNOWN_GOOD
        row["advice"] = ADVICE_BY_SIGNATURE.get(row["signature"], "") if known_good else "model error: RL can fix it"
        row["example"] = (row["example"] or "")[:160]
    return rows


def reward_variance(catalog: Catalog, stage: str, source: str = BASE) -> list[dict[str, Any]]:
    """Per task: samples, mean reward, reward variance and spread over the graded rollouts (infra failures out)."""
    return catalog.query(
        """SELECT task_id, count(*) AS samples, avg(reward) AS mean_reward, var_pop(reward) AS variance,
                  max(reward) - min(reward) AS spread
           FROM trajectories
           WHERE stage = ? AND source = ? AND coalesce(error_class, '') NOT IN ('retryable_infra', 'task')
           GROUP BY task_id ORDER BY variance DESC, task_id""",
        [stage, source],
    )


def rollout_errors(catalog: Catalog, stage: str, source: str = BASE) -> dict[str, Any]:
    """Rollouts by error class, the infra share, and the mean reward / pass rate.

    A rollout that ended cleanly has no error class (NULL): the comparisons are coalesced so it counts as a
    zero in every share — a bare ``avg(error_class = ...)`` skips NULLs and divides by the failures only."""
    [row] = catalog.query(
        """SELECT count(*) AS rollouts, avg(reward) AS mean_reward, avg(coalesce(passed, false)::INT) AS pass_rate,
                  avg(coalesce(error_class = 'retryable_infra', false)::INT) AS infra_rate,
                  count(*) FILTER (WHERE error_class = 'model') AS model_errors,
                  count(*) FILTER (WHERE error_class = 'task') AS task_errors,
                  count(*) FILTER (WHERE error_class = 'retryable_infra') AS infra_errors
           FROM trajectories WHERE stage = ? AND source = ?""",
        [stage, source],
    )
    return row


def dialect_mismatches(catalog: Catalog, stage: str, source: str = BASE) -> list[dict[str, Any]]:
    """Rollouts that stopped on turns written in another tool-call dialect than the harness reads
    (``envs.harness.parsing.dialect_mismatch``), by (written, read) pair, most first."""
    rows = catalog.query(
        "SELECT error FROM trajectories WHERE stage = ? AND source = ? AND error LIKE '%but this harness reads%'",
        [stage, source],
    )
    counts = Counter(match.groups() for row in rows if (match := MISMATCH.search(row["error"])) is not None)
    return [{"written": w, "read": r, "rollouts": n} for (w, r), n in counts.most_common()]
