"""SIGKILL during training, then resume: the next step is the step an uninterrupted run takes.

The loop-level test kills the synchronous loop (tiny policy, in a subprocess) right after a checkpoint, while the next
step runs, and resumes it in a new process: the first step after the resume trains on the same rollouts (rewards,
tokens) and has the same loss as an uninterrupted run of the same config, bit for bit (checkpoints hold the optimizer,
the scheduler and every RNG; the engine reloads the checkpoint's weights, the task stream its cursor).

The end-to-end test (slow) kills ``recipe run --profile smoke`` the same way during the overfit stage's training and
resumes it with ``recipe run --resume``: the stages that passed are reused untouched, the overfit stage passes, every
manifest parses, the catalog holds each training step once and no doubled rollouts, and the first step after the
resume has the loss of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from envs.build import ensure_environment, load_tasks
from tasks.run_store import RunStore, StageStatus
from trainer.local import list_checkpoints
from trainer.local.checkpoint import checkpoint_name
from trainer.loops import LoopHistory
from trainer.model import TinyModelSpec, bootstrap_policy, save_policy

REPO = Path(__file__).resolve().parents[2]
SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=2048)

LOOP_RUNNER = """
import json, sys
from contextlib import asynccontextmanager
from pathlib import Path

import torch

from envs.build import load_tasks
from envs.harness.agent import HarnessConfig, SampleEnv
from envs.harness.chat import ToolListing
from envs.rollout import local_envs
from envs.types import GradeResult
from trainer.local import TrainerConfig
from trainer.loops import LoopHooks, LoopJob, SyncLoopConfig, TaskFilter, run_sync_loop

data, policy, out, steps = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(1)


def coin_envs(task):  # real worlds and tools, a grade that alternates by sample: every group has reward variance
    inner = local_envs(task, data / "worlds", ("filesystem",))

    @asynccontextmanager
    async def open_env(sample_index):
        async with inner(sample_index) as sample:
            score = float(sample_index % 2)
            yield SampleEnv(sample.tools, lambda answer: GradeResult(score=score, passed=bool(score), criteria=[]))

    return open_env


def on_rollouts(step, trajectories):  # what the step trains on, one line per step
    rows = [{"task": t.task_id, "reward": t.reward, "tokens": t.tokens} for t in trajectories]
    with open(out / "rollouts.jsonl", "a") as file:
        file.write(json.dumps({"step": step, "rollouts": rows}) + "\\n")


harness = HarnessConfig(
    tool_listing=ToolListing.COMPACT, max_turns=1, max_tokens_per_turn=6, context_budget_tokens=2048, seed=0
)
config = SyncLoopConfig(
    prompts_per_step=2,
    samples_per_prompt=2,
    steps=steps,
    tasks=TaskFilter(limit=5),
    harness=harness,
    trainer=TrainerConfig(lr=1e-3, token_budget=8192),
    apps=("filesystem",),
    checkpoint_every=1,
    max_num_seqs=1,  # one sequence at a time: logprobs do not depend on how requests happen to batch
)
out.mkdir(parents=True, exist_ok=True)
job = LoopJob(policy, load_tasks(data), data / "worlds", out, LoopHooks(on_rollouts=on_rollouts), coin_envs)
run_sync_loop(job, config)
"""


def _spawn(args: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen:
    """A child in its own process group (a kill takes its helpers too), output to ``log``."""
    sink = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 (the child holds it)
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def _kill_when(process: subprocess.Popen, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
    """SIGKILL ``process``'s whole group as soon as ``ready()`` holds; fail if it ended or timed out first."""
    deadline = time.monotonic() + timeout_s
    try:
        while not ready():
            assert process.poll() is None, f"the process ended (rc {process.returncode}) before {what}"
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
            time.sleep(0.02)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def _finish(process: subprocess.Popen, timeout_s: float, log: Path | None = None) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    assert process.returncode == 0, tail


def _checkpoint_steps(root: Path) -> list[int]:
    return [int(path.name.split("-")[1]) for path in list_checkpoints(root)]


def _step_rollouts(out: Path) -> dict[int, list[dict]]:
    """Each step's rollouts as recorded (a killed step's line may be missing or cut short: it is left out)."""
    found: dict[int, list[dict]] = {}
    for line in (out / "rollouts.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        found[row["step"]] = row["rollouts"]
    return found


# --- the loop ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def loop_inputs(tmp_path_factory) -> tuple[Path, Path]:
    data = tmp_path_factory.mktemp("data")
    ensure_environment(data, seed=0)
    model, tokenizer = bootstrap_policy([t.prompt for t in load_tasks(data)], SPEC, vocab_size=600)
    return data, save_policy(model, tokenizer, tmp_path_factory.mktemp("policy") / "policy")


def test_a_sigkilled_sync_loop_resumes_with_the_uninterrupted_runs_next_step(loop_inputs, tmp_path: Path) -> None:
    data, policy = loop_inputs
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    loop = [sys.executable, "-c", LOOP_RUNNER, str(data), str(policy)]
    reference = _spawn([*loop, str(straight), "5"], log=tmp_path / "straight.log")
    victim = _spawn([*loop, str(killed), "50"], log=tmp_path / "killed.log")
    checkpoints = killed / "checkpoints"
    _kill_when(victim, lambda: 2 in _checkpoint_steps(checkpoints), 120, "a checkpoint of step 2")
    resumed_from = max(_checkpoint_steps(checkpoints))
    assert resumed_from < 5, "the victim ran too far past its checkpoint before the kill"
    resume = _spawn([*loop, str(killed), str(resumed_from + 1)], log=tmp_path / "resumed.log")
    _finish(resume, 120, tmp_path / "resumed.log")
    _finish(reference, 120, tmp_path / "straight.log")

    expected = LoopHistory.model_validate_json((straight / "history.json").read_text())
    got = LoopHistory.model_validate_json((killed / "history.json").read_text())
    assert [r.step for r in got.steps] == list(range(1, resumed_from + 2))  # nothing past the checkpoint kept
    for mine, theirs in zip(got.steps, expected.steps, strict=False):
        assert (mine.step, mine.positions, mine.trained) == (theirs.step, theirs.positions, True)
        assert (mine.loss, mine.reward_mean) == (theirs.loss, theirs.reward_mean), mine.step
    after = resumed_from + 1
    assert _step_rollouts(killed)[after] == _step_rollouts(straight)[after]  # same tokens, same rewards
    weights = [_weights(out / "checkpoints" / checkpoint_name(after)) for out in (killed, straight)]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])  # the same optimizer step


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "policy" / "model.safetensors")


# --- the pipeline -----------------------------------------------------------------------------------------------------


def _recipe_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    slow_start = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"}  # two busy cores: 20 s is not enough
    return env | slow_start | {"PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def _recipe(runs: Path, *args: str) -> list[str]:
    overrides = ["--set", "stages.overfit.steps=4"]  # a window between the first checkpoint and the last
    return [sys.executable, "-m", "cli", "run", *args, "--runs-root", str(runs), *overrides]


def _only_run(runs: Path) -> RunStore:
    [folder] = [p for p in runs.iterdir() if (p / "run.json").is_file()]
    return RunStore(folder)


def _train_rows(store: RunStore) -> list[dict]:
    import duckdb

    with duckdb.connect(str(store.catalog_path), read_only=True) as con:
        cursor = con.execute("SELECT run, step, loss FROM train_steps WHERE stage = 'overfit' ORDER BY step")
        return [dict(zip(("run", "step", "loss"), row, strict=True)) for row in cursor.fetchall()]


def _trajectory_counts(store: RunStore) -> dict[tuple[str, int | None], int]:
    import duckdb

    with duckdb.connect(str(store.catalog_path), read_only=True) as con:
        rows = con.execute(
            "SELECT source, step, count(*) FROM trajectories WHERE stage = 'overfit' GROUP BY source, step"
        ).fetchall()
    return {(source, step): n for source, step, n in rows}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_a_sigkilled_recipe_run_resumes_without_rerunning_or_doubling(tmp_path: Path) -> None:
    env = _recipe_env(tmp_path)
    straight_runs, killed_runs = tmp_path / "straight", tmp_path / "killed"
    reference = _spawn(
        [*_recipe(straight_runs, "--profile", "smoke"), "--stop-after", "overfit"], env, tmp_path / "straight.log"
    )
    _finish(reference, 1200, tmp_path / "straight.log")
    expected = _train_rows(_only_run(straight_runs))

    victim = _spawn(
        [*_recipe(killed_runs, "--profile", "smoke"), "--stop-after", "overfit"], env, tmp_path / "killed.log"
    )

    def overfit_checkpointed() -> bool:
        runs = [p for p in killed_runs.glob("*/4-overfit/train-overfit-*/checkpoints")] if killed_runs.is_dir() else []
        return any(_checkpoint_steps(path) for path in runs)

    _kill_when(victim, overfit_checkpointed, 1200, "an overfit checkpoint")
    store = _only_run(killed_runs)
    before = {m.folder: m for m in store.manifests()}
    assert before["4-overfit"].status is StageStatus.RUNNING
    [work] = store.root.glob("4-overfit/train-overfit-*")
    resumed_from = max(_checkpoint_steps(work / "checkpoints"))
    assert resumed_from < 4, "the overfit loop ran to its end before the kill"

    resume = _spawn(
        [*_recipe(killed_runs, "--resume", store.run_id), "--stop-after", "overfit"], env, tmp_path / "resumed.log"
    )
    _finish(resume, 1200, tmp_path / "resumed.log")

    after = {m.folder: m for m in store.manifests()}  # every manifest parses
    for folder in ("1-derisk", "2-tito", "3-systems"):
        assert after[folder] == before[folder], f"{folder} ran again"
    overfit = after["4-overfit"]
    assert overfit.status is StageStatus.PASSED and overfit.attempt == before["4-overfit"].attempt + 1
    rows = _train_rows(store)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # each step once: none doubled, none lost
    # The first step after the resume; to 1e-6, not bit for bit: the engine batches up to 32 sequences as requests
    # happen to arrive, which moves its logprobs (the loss's behaviour term) by ~1e-7 between any two runs.
    assert rows[resumed_from]["loss"] == pytest.approx(expected[resumed_from]["loss"], abs=1e-6)
    counts = _trajectory_counts(store)
    trained = {step: n for (source, step), n in counts.items() if source == "train/overfit"}
    assert set(trained) <= {1, 2, 3, 4} and set(trained) >= set(range(resumed_from + 1, 5))
    assert all(n == 2 * 4 for n in trained.values())  # prompts_per_step × samples_per_prompt: none doubled
    evals = {source: n for (source, _), n in counts.items() if not source.startswith("train/")}
    reference_counts = _trajectory_counts(_only_run(straight_runs))
    assert evals == {source: n for (source, _), n in reference_counts.items() if not source.startswith("train/")}
