"""Sync and async loops end to end on a tiny random policy (machinery, not learning), resume exactness of the task
cursor, and a weight push while requests are in flight on the real engine."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import torch

from envs.build import ensure_environment, load_tasks
from envs.harness.agent import HarnessConfig, SampleEnv
from envs.harness.chat import ToolListing
from envs.harness.policy import PolicyHarness, read_policy_harness
from envs.rollout import local_envs
from envs.types import GradeResult, TaskSpec
from tests.processes import running
from tests.trainer.torch_threads import one_torch_thread  # noqa: F401  (autouse: every test here)
from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine.weight_sync import push_weights
from trainer.local import TrainerConfig, latest_checkpoint
from trainer.loops import (
    AsyncLoopConfig,
    LoopHooks,
    LoopJob,
    RuntimeKind,
    SyncLoopConfig,
    TaskFilter,
    run_async_loop,
    run_sync_loop,
)
from trainer.loops.config import DeliberateCrash
from trainer.loops.engine_adapter import InProcessEngine
from trainer.model import TinyModelSpec, bootstrap_policy, save_policy

SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=2048)
HARNESS = HarnessConfig(
    tool_listing=ToolListing.COMPACT, max_turns=1, max_tokens_per_turn=6, context_budget_tokens=2048, seed=0
)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> tuple[Path, list[TaskSpec]]:
    data = tmp_path_factory.mktemp("data")
    ensure_environment(data, seed=0)
    return data, load_tasks(data)


@pytest.fixture(scope="module")
def policy_dir(env, tmp_path_factory) -> Path:
    _, tasks = env
    model, tokenizer = bootstrap_policy([t.prompt for t in tasks], SPEC, vocab_size=600)
    return save_policy(model, tokenizer, tmp_path_factory.mktemp("policy") / "policy")


def coin_envs(worlds_root: Path):
    """Real world copies and tools, but a grade that alternates by sample: every group has reward variance."""

    def envs_for(task: TaskSpec):
        inner = local_envs(task, worlds_root, ("filesystem",))

        @asynccontextmanager
        async def open_env(sample_index: int) -> AsyncIterator[SampleEnv]:
            async with inner(sample_index) as sample:
                score = float(sample_index % 2)
                yield SampleEnv(sample.tools, lambda answer: GradeResult(score=score, passed=bool(score), criteria=[]))

        return open_env

    return envs_for


def config(cls, steps: int, **extra):
    return cls(
        prompts_per_step=2,
        samples_per_prompt=2,
        steps=steps,
        tasks=TaskFilter(limit=5),
        harness=HARNESS,
        trainer=TrainerConfig(lr=1e-4, token_budget=8192),
        apps=("filesystem",),
        terminal_max_tokens_per_turn=384,
        checkpoint_every=1,
        max_num_seqs=8,
        **extra,
    )


def test_sync_loop_trains_pushes_and_checkpoints(env, policy_dir, tmp_path):
    data, tasks = env
    seen = []
    job = LoopJob(policy_dir, tasks, data / "worlds", tmp_path, LoopHooks(seen.append), coin_envs(data / "worlds"))
    history = run_sync_loop(job, config(SyncLoopConfig, 2))
    assert [r.step for r in history.steps] == [1, 2] and seen == history.steps
    assert all(r.trained and r.trajectories == 4 and r.reward_mean == 0.5 for r in history.steps)
    assert all(r.generate_s > 0 and r.train_s > 0 and r.sync_s > 0 for r in history.steps)
    assert [r.positions for r in history.steps] == [[0, 1], [2, 3]]
    assert all(r.activity is not None for r in history.steps) and history.activity() is not None
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step-00000002"
    assert (tmp_path / "history.json").is_file()
    assert_carries_the_harness(tmp_path)


def assert_carries_the_harness(out: Path) -> None:
    """The newest checkpoint's policy folder holds the loop's harness, apps and terminal turn limit, nudge and seed
    stored off."""
    stored = read_policy_harness(latest_checkpoint(out / "checkpoints") / "policy")
    assert stored == PolicyHarness(
        apps=("filesystem",), harness=HARNESS.model_copy(update={"seed": None}), terminal_max_tokens_per_turn=384
    )


def test_a_loop_with_the_crash_defect_raises_at_its_step_before_training(env, policy_dir, tmp_path):
    data, tasks = env
    job = LoopJob(policy_dir, tasks, data / "worlds", tmp_path, envs_for=coin_envs(data / "worlds"))
    with pytest.raises(DeliberateCrash, match="crashed at step 2"):
        run_sync_loop(job, config(SyncLoopConfig, 3, crash_at_step=2))
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step-00000001"  # step 2 never trained


def test_sync_resume_continues_the_exact_task_stream(env, policy_dir, tmp_path):
    data, tasks = env
    worlds, envs = data / "worlds", coin_envs(data / "worlds")
    a, b = (LoopJob(policy_dir, tasks, worlds, tmp_path / name, envs_for=envs) for name in ("a", "b"))
    straight = run_sync_loop(a, config(SyncLoopConfig, 3))
    run_sync_loop(b, config(SyncLoopConfig, 2))
    resumed = run_sync_loop(b, config(SyncLoopConfig, 3))
    assert [r.positions for r in resumed.steps] == [r.positions for r in straight.steps] == [[0, 1], [2, 3], [4, 5]]
    assert resumed.steps[-1].wall_s >= resumed.steps[1].wall_s  # the clock continues across the resume


@pytest.mark.parametrize("runtime", [RuntimeKind.ASYNCIO, RuntimeKind.SUBPROCESS])
def test_async_loop_runs_on_the_real_engine(env, policy_dir, tmp_path, runtime):
    data, tasks = env
    cfg = config(AsyncLoopConfig, 2, workers=3, max_staleness=1, runtime=runtime)
    job = LoopJob(policy_dir, tasks, data / "worlds", tmp_path, envs_for=coin_envs(data / "worlds"))
    history = run_async_loop(job, cfg)
    assert [r.step for r in history.steps] == [1, 2]
    assert all(len(r.positions) == 2 and r.staleness_max <= 1 for r in history.steps)
    resumed = run_async_loop(job, cfg.model_copy(update={"steps": 3}))
    assert [r.step for r in resumed.steps] == [1, 2, 3]
    trained = [p for r in resumed.steps for p in r.positions]
    assert len(set(trained)) == len(trained)  # no position trained twice across the resume
    assert_carries_the_harness(tmp_path)


def test_weight_push_keeps_requests_in_flight(policy_dir):
    from trainer.model import load_policy

    model, tokenizer = load_policy(policy_dir)
    new_weights = {k: v + 0.01 for k, v in model.state_dict().items() if k != "lm_head.weight"}

    class Source:
        def state_dict_for_engine(self):
            return new_weights

    async def scenario(client: InProcessEngine):
        params = SamplingParams(temperature=1.0, seed=1, max_tokens=300, ignore_eos=True)
        running = asyncio.create_task(client.engine.generate([1, 2, 3], params))
        while client.engine.num_running == 0:
            await asyncio.sleep(0.001)
        version = await push_weights(client, Source())
        return version, await running

    with Engine(model, tokenizer, EngineConfig(max_num_seqs=2)) as engine:
        version, done = asyncio.run(scenario(InProcessEngine(engine)))
    # one request, begun on version 0 and finished on version 1: it froze through the push and then went on
    assert version == 1 and (done.weight_version_start, done.weight_version) == (0, 1)
    assert done.finish_reason == "length" and len(done.token_ids_T) == 300


def test_a_remote_fleet_drives_our_servers_routes(policy_dir, tmp_path):
    """RemoteFleet over our engine's HTTP server (kind ``ours``): a push stages a new folder and loads it, completions
    are stamped with the server's own version, loading a policy folder links its weights, and a failed load says
    which engine and route."""
    import httpx

    from envs.harness.engine_client import Sampling
    from trainer.engine.server import create_app
    from trainer.model import load_policy
    from trainer.vllm.remote import EngineControlError, EngineKind, RemoteEngines, RemoteFleet

    model, tokenizer = load_policy(policy_dir)
    trained, _ = load_policy(policy_dir)
    with torch.no_grad():
        trained.model.embed_tokens.weight.add_(0.5)

    class Source:
        def state_dict_for_engine(self):
            return {k: v for k, v in trained.state_dict().items() if k != "lm_head.weight"}

    engines = RemoteEngines(urls=("http://engine",), model="policy", kind=EngineKind.OURS, staging_dir=tmp_path / "w")

    async def scenario(engine: Engine) -> tuple[int, int, int]:
        transport = httpx.ASGITransport(app=create_app(engine, "policy"))
        async with RemoteFleet(engines, transport=transport) as fleet:
            version = await push_weights(fleet, Source())
            completion = await fleet.complete([5, 6, 7], Sampling(max_tokens=2, seed=0))
            loaded = await fleet.load(policy_dir)
            with pytest.raises(EngineControlError, match=r"http://engine/update_weights.*HTTP 4"):
                await fleet._load_everywhere(tmp_path / "missing")
            return version, completion.weight_version, loaded

    with Engine(model, tokenizer, EngineConfig(max_num_seqs=2)) as engine:
        assert asyncio.run(scenario(engine)) == (1, 1, 2)
        assert engine.version == 2 and not engine.paused
    staged = sorted(p.name for p in (tmp_path / "w").iterdir())
    assert len(staged) == 2 and staged[0].startswith("v00001-") and staged[1].startswith("v00002-")
    weights = tmp_path / "w" / staged[1] / "model.safetensors"
    assert weights.stat().st_ino == (policy_dir / "model.safetensors").stat().st_ino  # linked, not copied


@pytest.mark.slow
def test_async_loop_on_ray_actors(env, policy_dir, tmp_path):
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the stub grader travels to the rollout actor
    data, tasks = env
    cfg = config(AsyncLoopConfig, 2, workers=2, max_staleness=1, runtime=RuntimeKind.RAY)
    envs = coin_envs(data / "worlds")
    history = run_async_loop(LoopJob(policy_dir, tasks, data / "worlds", tmp_path, envs_for=envs), cfg)
    assert [r.step for r in history.steps] == [1, 2]
    assert all(len(r.positions) == 2 and r.staleness_max <= 1 for r in history.steps)
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step-00000002"
    assert_carries_the_harness(tmp_path)


def test_trainer_process_reports_failures_and_a_dead_child(policy_dir, tmp_path):
    from trainer.loops.subprocess_runtime import TrainerProcess, TrainerProcessError

    with pytest.raises(TrainerProcessError, match=r"start failed in the trainer process:(.|\n)*missing"):
        TrainerProcess(tmp_path / "missing", tmp_path / "out", config(AsyncLoopConfig, 1))
    trainer = TrainerProcess(policy_dir, tmp_path / "out", config(AsyncLoopConfig, 1))
    try:
        assert trainer.resumed is None
        weights = trainer.state_dict_for_engine()
        assert weights and all(isinstance(t, torch.Tensor) for t in weights.values())
        with pytest.raises(TrainerProcessError, match="train failed in the trainer process"):
            trainer.train([])  # an empty batch is the trainer's error, raised here with the child's traceback
        trainer._process.kill()
        with pytest.raises(TrainerProcessError, match=r"exited|gone"):
            trainer.train([])
    finally:
        trainer.close()


def test_trainer_process_exits_with_its_parent(policy_dir, tmp_path):
    """A parent killed mid-run (SIGKILL: no cleanup) leaves no trainer process behind: the child's pipe closes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = f"""
import sys
from pathlib import Path
from tests.trainer.loops.test_sync_loop import config
from trainer.loops import AsyncLoopConfig
from trainer.loops.subprocess_runtime import TrainerProcess
trainer = TrainerProcess(Path({str(policy_dir)!r}), Path({str(tmp_path / "out")!r}), config(AsyncLoopConfig, 1))
print(trainer._process.pid, flush=True)
sys.stdin.read()
"""
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=os.getcwd()
    )
    try:
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and running(child):
            time.sleep(0.1)
        assert not running(child), "the trainer process outlived its killed parent"
    finally:
        parent.kill()
