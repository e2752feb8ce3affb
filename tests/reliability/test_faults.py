"""Each injected fault kind (``envs.faults``) at its real boundary: classified, recovered where retryable, no hang."""

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from envs.faults import FaultKind, FaultPlan, read_fault_log
from envs.harness.engine_client import CompletionsClient, EngineError, Sampling
from envs.judge import JudgeConfig, LlmJudgeClient
from envs.mcp.client import GatewayClient, Transport, gateway_command
from envs.mcp.servers import GARBAGE
from envs.sandbox.base import SandboxOptions, SandboxTimeouts
from envs.sandbox.local import LocalProvider
from envs.sandbox.pool import SandboxPool
from tests.trainer.loops.stub_runtime import StubRuntime
from tests.trainer.loops.test_sync_loop import coin_envs, config, env, policy_dir  # noqa: F401  (fixtures)
from trainer.engine.completions import EngineCompletions
from trainer.loops import LoopHooks, LoopJob, SyncLoopConfig, run_sync_loop
from trainer.loops.async_loop import AsyncLoopConfig, AsyncStart, StreamCursor, run_async
from trainer.loops.history import LoopHistory

pytestmark = pytest.mark.timeout(60)


def only(kind: FaultKind, tmp_path: Path, **changes) -> FaultPlan:
    return FaultPlan(rate=1.0, kinds=(kind,), log=tmp_path / "faults.jsonl", **changes)


@pytest.fixture
def world(tmp_path: Path) -> Path:
    root = tmp_path / "pristine" / "w1"
    (root / "filesystem").mkdir(parents=True)
    (root / "filesystem" / "a.txt").write_text("alpha\n")
    return root


def test_off_means_no_injector_and_on_is_seeded_and_counted(tmp_path: Path) -> None:
    assert FaultPlan().injector("x") is None and FaultPlan(rate=0.5, kinds=()).injector("x") is None
    plan = FaultPlan(rate=0.3, seed=7, log=tmp_path / "f.jsonl")
    first, second = plan.injector("site"), plan.injector("site")
    draws = [first.pick(list(FaultKind)) for _ in range(200)]
    assert draws == [second.pick(list(FaultKind)) for _ in range(200)]
    assert 30 < sum(d is not None for d in draws) < 90
    assert sum(first.report().values()) == sum(d is not None for d in draws)
    assert sum(read_fault_log(plan.log)["injected"].values()) == 2 * sum(d is not None for d in draws)
    assert not plan.injector("site").fires(FaultKind.TOOL_HANG) or FaultKind.TOOL_HANG in plan.kinds


async def _gateway_call(world: Path, plan: FaultPlan, call_timeout_s: float = 60.0):
    argv = gateway_command(world, Transport.STDIO, apps=("filesystem",), faults=plan)
    async with GatewayClient.for_command(argv, call_timeout_s=call_timeout_s) as client:
        return await client.call("filesystem_read_file", {"path": "a.txt"})


@pytest.mark.parametrize(
    ("kind", "text", "empty"), [(FaultKind.TOOL_GARBAGE, GARBAGE, False), (FaultKind.TOOL_EMPTY, "", True)]
)
def test_a_gateway_answering_garbage_or_nothing_is_an_answer_the_records_show(world, tmp_path, kind, text, empty):
    outcome = asyncio.run(_gateway_call(world, only(kind, tmp_path)))
    assert not outcome.is_error and outcome.returned_empty is empty and outcome.text == text
    assert read_fault_log(tmp_path / "faults.jsonl")["injected"] == {str(kind): 1}


def test_a_hung_tool_call_ends_at_the_client_timeout(world, tmp_path) -> None:
    outcome = asyncio.run(_gateway_call(world, only(FaultKind.TOOL_HANG, tmp_path, stall_s=30.0), call_timeout_s=1.0))
    assert outcome.is_error and outcome.timed_out


def test_a_crashed_gateway_is_a_transport_error_and_the_pool_replaces_it(world, tmp_path) -> None:
    plan = only(FaultKind.TOOL_CRASH, tmp_path)
    options = SandboxOptions(scratch=tmp_path / "s", apps=("filesystem",), faults=plan, timeouts=SandboxTimeouts())

    async def scenario() -> tuple:
        async with SandboxPool(LocalProvider({"w1": world}, options), size_per_world=1) as pool:
            async with pool.acquire("w1") as sandbox:
                try:
                    await asyncio.wait_for(sandbox.call("filesystem.read_file", {"path": "a.txt"}), 30)
                except Exception as error:  # the broken transport raises: the harness makes it retryable_infra
                    raised = error
                else:
                    raised = None
            async with pool.acquire("w1"):
                pass
            return raised, pool.stats.replaced

    raised, replaced = asyncio.run(scenario())
    assert raised is not None and replaced == 1
    assert read_fault_log(plan.log)["retried"] == {"sandbox_replaced": 1}


def test_a_failed_sandbox_start_is_retried_with_backoff_then_raised(world, tmp_path) -> None:
    plan = FaultPlan(rate=1.0, kinds=(FaultKind.SANDBOX_START,), log=tmp_path / "faults.jsonl")
    provider = LocalProvider({"w1": world}, SandboxOptions(scratch=tmp_path / "s", apps=("filesystem",), faults=plan))
    pool = SandboxPool(provider, size_per_world=1, start_retries=2)

    async def scenario() -> None:
        async with pool.acquire("w1"):
            pass

    with pytest.raises(Exception, match="injected fault"):
        asyncio.run(scenario())
    assert pool.stats.start_retries == 2
    assert read_fault_log(plan.log) == {"injected": {"sandbox_start": 3}, "retried": {"sandbox_start": 2}}


class _SlowEngine:
    async def generate(self, prompt, params):
        raise AssertionError("an injected drop / 500 never reaches the engine")


@pytest.mark.parametrize("kind", [FaultKind.ENGINE_DROP, FaultKind.ENGINE_500, FaultKind.ENGINE_STALL])
def test_engine_faults_are_retryable_engine_errors_within_the_timeout(kind, tmp_path) -> None:
    plan = only(kind, tmp_path, stall_s=60.0, timeout_s=0.2)
    client = EngineCompletions(_SlowEngine(), plan.injector("engine"))  # type: ignore[arg-type]
    with pytest.raises(EngineError) as raised:
        asyncio.run(client.complete([1, 2], Sampling(max_tokens=4)))
    assert raised.value.retryable


@pytest.mark.parametrize("kind", [FaultKind.ENGINE_DROP, FaultKind.ENGINE_500, FaultKind.ENGINE_STALL])
def test_engine_faults_over_http_are_retryable_engine_errors_within_the_timeout(kind, tmp_path) -> None:
    plan = only(kind, tmp_path, stall_s=60.0, timeout_s=0.2)

    async def scenario() -> None:  # the port is closed: only an injected fault answers, and each one is retryable
        async with CompletionsClient("http://127.0.0.1:9", "policy", faults=plan.injector("engine")) as client:
            await client.complete([1, 2], Sampling(max_tokens=4))

    with pytest.raises(EngineError) as raised:
        asyncio.run(scenario())
    assert raised.value.retryable and str(kind) in read_fault_log(plan.log)["injected"]


class _Judge(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        content = json.dumps({"passed": True, "reason": "ok"})
        body = json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize(
    "kind", [FaultKind.JUDGE_429, FaultKind.JUDGE_500, FaultKind.JUDGE_SLOW, FaultKind.JUDGE_MALFORMED]
)
def test_judge_faults_are_retried_by_the_judge_until_it_gets_a_verdict(kind, tmp_path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    plan = FaultPlan(rate=0.5, kinds=(kind,), seed=3, stall_s=30.0, log=tmp_path / "faults.jsonl")
    config = JudgeConfig(
        base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
        model="judge",
        timeout_s=0.5,
        max_attempts=12,
        backoff_base_s=0.01,
        backoff_max_s=0.05,
    )
    try:
        with LlmJudgeClient(config, faults=plan.injector("judge")) as judge:
            verdicts = [judge.judge("task", "criterion", "answer", "") for _ in range(4)]
    finally:
        server.shutdown()
    assert all(v.passed for v in verdicts)
    counts = read_fault_log(plan.log)
    assert counts["injected"].get(str(kind), 0) >= 1 and sum(counts["retried"].values()) >= 1


def test_a_dead_generation_worker_is_replaced_and_its_group_requeued(tmp_path) -> None:
    runtime = StubRuntime(ties=False)
    plan = FaultPlan(rate=0.3, kinds=(FaultKind.WORKER_CRASH,), seed=1, log=tmp_path / "faults.jsonl")
    config = AsyncLoopConfig(prompts_per_step=2, workers=2, max_staleness=1, steps=6, checkpoint_every=0, faults=plan)
    history = LoopHistory(kind="async")
    asyncio.run(run_async(runtime, config, AsyncStart(0, StreamCursor(), history), tmp_path))
    assert [r.step for r in history.steps] == [1, 2, 3, 4, 5, 6]
    trained = [p for r in history.steps for p in r.positions]
    assert len(set(trained)) == len(trained) == 12
    assert set(runtime.generated) >= set(trained)  # a re-queued position was generated again, by another worker
    counts = read_fault_log(plan.log)
    assert counts["injected"]["worker_crash"] >= 1
    assert counts["retried"]["worker_crash"] == counts["injected"]["worker_crash"]


def test_the_sync_loop_survives_engine_faults_and_crashes_and_records_every_rollout(env, policy_dir, tmp_path):  # noqa: F811
    data, tasks = env
    kinds = (FaultKind.ENGINE_500, FaultKind.ENGINE_DROP, FaultKind.WORKER_CRASH)
    plan = FaultPlan(rate=0.25, kinds=kinds, seed=5, log=tmp_path / "faults.jsonl")
    recorded: list = []
    hooks = LoopHooks(on_rollouts=lambda step, trajectories: recorded.extend(trajectories))
    job = LoopJob(policy_dir, tasks, data / "worlds", tmp_path / "out", hooks, coin_envs(data / "worlds"))
    history = run_sync_loop(job, config(SyncLoopConfig, 3, faults=plan))
    assert [r.step for r in history.steps] == [1, 2, 3]
    groups: dict[str, list[int]] = {}
    for trajectory in recorded:
        groups.setdefault(trajectory.group_id, []).append(trajectory.sample_index)
    assert len(groups) == 6 and all(sorted(indexes) == [0, 1] for indexes in groups.values())  # none lost
    assert all(t.reward == 0 for t in recorded if t.error_class == "retryable_infra")
    counts = read_fault_log(plan.log)
    assert counts["injected"]["worker_crash"] >= 1
    assert counts["retried"]["worker_crash"] == counts["injected"]["worker_crash"]
    engine_faults = counts["injected"].get("engine_500", 0) + counts["injected"].get("engine_drop", 0)
    assert engine_faults >= 1 and counts["retried"]["rollout"] >= 1  # an infra-failed rollout was run again
