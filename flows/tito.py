"""Stage 2 · TITO check: the trainer trains on exactly the tokens the engine sampled.

1. The base rolls out the train tasks that need the most tool calls (their oracles' step counts), ``samples``
   times each, against the run's engine over HTTP (``/v1/completions`` with token ids: our engine on loopback, or
   any vLLM-compatible URL); every exchange is recorded.
2. Each trajectory is held against the records and the trainer's batch (``trainer.tito.check_tito``): each turn's
   prompt is exactly the tokens so far and extends the previous request, the sampled span is exactly what the
   engine returned (ids and logprobs), the loss mask covers exactly the sampled spans, and ``TrainBatch`` rows hold
   the same ids, mask and logprobs.
3. Beside it, the share of sampled turns a chat-completions harness would have re-tokenised into other ids.

Gate: zero misalignments, over at least ``min_multi_call_rollouts`` rollouts with two or more tool calls.

    recipe stage tito --run RUN
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.config import Defect, StageName
from flows.stage import DEFAULT_RUNS_ROOT, open_stage
from flows.stage_gates import tito_gate
from flows.stage_work import StageWork
from tasks.context import RolloutJob
from tasks.tito import tito_rollouts
from tasks.validation import Suite


@flow(name="tito", log_prints=True)
def tito(run: str, runs_root: str = str(DEFAULT_RUNS_ROOT)) -> dict:
    """Stage 2 · TITO: recorded multi-turn rollouts against the engine's HTTP API; zero misalignments."""
    with open_stage(run, StageName.TITO, Path(runs_root)) as stage:
        section, config = stage.section, stage.config
        work = StageWork.of(stage)
        settings = work.inputs.policy_settings()
        settings = settings.model_copy(
            update={"harness": settings.harness.model_copy(update={"max_turns": section.max_turns})}
        )
        train, _ = work.inputs.task_sets(settings)
        # the tasks whose oracles take the most calls first (a team's task without one: last)
        chosen = sorted(train, key=lambda t: (-len(t.oracle.steps if t.oracle else ()), t.task_id))[: section.tasks]
        with stage.timed("rollouts"):
            engine = work.engine_settings(settings.harness.context_budget_tokens)
            job = RolloutJob(Path(work.inputs.base_policy()), chosen, settings, engine, section.samples, config.seed)
            report = tito_rollouts(work.scope, job, retokenize=Defect.RETOKENIZING_HARNESS in config.defects)
        stage.validate(Suite.TRAJECTORIES)
        gate = tito_gate(
            report.total_misalignments,
            report.multi_call_rollouts,
            report.drift_rate,
            section.thresholds,
            report.examples,
            report.rerender_changed,
        )
        gate.metrics |= {
            "trajectories": report.trajectories,
            "sampled_turns": report.sampled_turns,
            "exchanges": report.exchanges,
            "drift_turns": report.drift_turns,
            "misalignments_by_kind": dict(report.misalignments),
        }
        return stage.finish(gate)
