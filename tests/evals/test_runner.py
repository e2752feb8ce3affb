"""The eval runner against a scripted-policy HTTP engine, MCP harness with in-process apps (``local_envs``).

The engine (a copy of the pattern in ``tests/envs/harness/conftest.py``) replies by turn, read from the prompt; a model
can be told to answer HTTP 500 to its first N requests, which makes the harness report a retryable infra failure, or
HTTP 400 to every request, which stops the eval. ``/v1/models`` lists the scripted models (with ``max_model_len``).
Tasks: 2 that the script solves (expected 412.5, read from notes/q1.txt) and 2 it fails (expected 7), 2 passes each.
The toy tier (t-0, t-2) is the two the script solves. A pipeline stage's evals are written the way the pipeline writes
them, then run again through `recipe eval run --run RUN --stage hero`.
"""

import asyncio
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envs.apps import World
from envs.harness.agent import HarnessConfig
from envs.harness.chat import ANSWER_INSTRUCTIONS, ToolListing, compact_system_prompt, initial_messages, prompt_ids
from envs.harness.policy import HARNESS_FILE, PolicyHarness, write_policy_harness
from envs.harness.tools import LocalToolSession
from envs.loaders import save_jsonl
from envs.net import serve_in_thread
from envs.types import AnswerNumeric, Domain, ErrorClass, StopReason, TaskSpec, Tier
from evals.errors import EvalConfigError
from evals.run_folder import RESULT_FILE, TRAJECTORIES_FILE, TRIALS_FILE, load_eval, read_trials
from evals.runner import run_eval
from evals.sources import SourceKind, TaskSource
from evals.spec import EngineSpec, EvalSpec, HarnessOverrides, McpBackend
from trainer.engine import Engine as EngineImpl
from trainer.engine import EngineConfig
from trainer.engine.server import create_app, default_served_name
from trainer.model import TinyModelSpec, bootstrap_policy, load_policy, save_policy
from trainer.tokenizer import save_tokenizer, train_tokenizer

READ_Q1 = '<tool_call>\n{"name": "filesystem_read_file", "arguments": {"path": "notes/q1.txt"}}\n</tool_call>'
SOLVER = [READ_Q1, "The answer is 412.5"]


@dataclass
class Engine:
    tokenizer: object
    url: str = ""
    scripts: dict[str, list[str]] = field(default_factory=dict)
    fail_first: dict[str, int] = field(default_factory=dict)  # model → requests still to answer with HTTP 500
    rejected: set[str] = field(default_factory=set)  # models whose every request gets HTTP 400
    max_model_len: int = 100_000
    requests: list[dict] = field(default_factory=list)

    def app(self) -> FastAPI:
        app = FastAPI()
        tok = self.tokenizer

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": m, "max_model_len": self.max_model_len} for m in self.scripts]}

        @app.post("/v1/completions")
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            self.requests.append(body)
            model = body["model"]
            if model in self.rejected:
                return JSONResponse({"error": {"message": "max_tokens is too large for this model"}}, 400)
            if self.fail_first.get(model, 0) > 0:
                self.fail_first[model] -= 1
                return JSONResponse({"error": {"message": "scripted failure"}}, 500)
            script = self.scripts[model]
            turn = tok.decode(body["prompt"], skip_special_tokens=False).count("<|im_start|>assistant") - 1
            ids = [*tok.encode(script[min(turn, len(script) - 1)], add_special_tokens=False), tok.eos_token_id]
            ids = ids[: body["max_tokens"]]
            choice = {
                "token_ids": ids,
                "logprobs": {"token_logprobs": [-0.1] * len(ids)},
                "finish_reason": "stop" if ids[-1] == tok.eos_token_id else "length",
            }
            return JSONResponse({"choices": [choice]})

        return app


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    corpus = [f"{READ_Q1} revenue was {i * 37 % 900} million; the answer is {i}.5" for i in range(200)]
    return save_tokenizer(train_tokenizer(corpus, vocab_size=600), tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def engine(tokenizer_dir):
    from transformers import AutoTokenizer

    state = Engine(AutoTokenizer.from_pretrained(tokenizer_dir))
    with serve_in_thread(state.app()) as url:
        state.url = url
        yield state


@pytest.fixture
def task_file(tmp_path) -> Path:
    world = tmp_path / "worlds" / "w"
    (world / "filesystem" / "notes").mkdir(parents=True)
    (world / "apps_data").mkdir()
    (world / "filesystem" / "notes" / "q1.txt").write_text("Q1 revenue: 412.5 million\n")
    tasks = [
        TaskSpec(
            task_id=f"t-{i}",
            world_id="w",
            domain=Domain.INVESTMENT_BANKING if i < 2 else Domain.CORPORATE_LAW,
            tier=Tier.TOY if i % 2 == 0 else Tier.STANDARD,
            prompt=f"Question {i}: what was Q1 revenue?",
            rubric=[AnswerNumeric(expected=412.5 if i in (0, 2) else 7.0)],
        )
        for i in range(4)
    ]
    save_jsonl(tasks, tmp_path / "tasks.jsonl")
    return tmp_path / "tasks.jsonl"


def _spec(task_file: Path, engine: Engine, tokenizer_dir: Path, model: str, out: Path, **extra) -> EvalSpec:
    fields = {
        "tasks": TaskSource(kind=SourceKind.JSONL, path=task_file, worlds=task_file.parent / "worlds"),
        "harness": "mcp",
        "mcp_backend": McpBackend.IN_PROCESS,
        "engine": EngineSpec(base_url=engine.url, model=model, tokenizer=str(tokenizer_dir), timeout_s=10),
        "passes": 2,
        "concurrency": 4,
        "harness_config": HarnessOverrides(max_turns=4, max_tokens_per_turn=200, context_budget_tokens=40_000),
        "out_dir": out,
    }
    return EvalSpec(**(fields | extra))


def test_run_writes_trials_trajectories_and_summary(engine, tokenizer_dir, task_file, tmp_path):
    engine.scripts["solver"] = SOLVER
    seen = []
    result = run_eval(_spec(task_file, engine, tokenizer_dir, "solver", tmp_path / "out"), progress=seen.append)

    # t-0 and t-2 expect 412.5 (solved every pass), t-1 and t-3 expect 7: Pass@1 = 2/4 in both passes.
    assert result.summary.n_tasks == 4 and result.summary.n_passes == 2
    assert result.summary.pass_at_1.mean == 0.5 and result.summary.pass_at_1.std == 0.0
    assert result.summary.by_domain["investment_banking"].pass_at_1.mean == 0.5
    assert result.summary.by_tier["toy"].pass_at_1.mean == 1.0  # t-0, t-2
    assert result.summary.by_tier["standard"].pass_at_1.mean == 0.0  # t-1, t-3
    assert [p.done for p in seen] == [0, 1, 2, 3, 4, 5, 6, 7, 8] and seen[-1].total == 8

    trials = read_trials(tmp_path / "out" / TRIALS_FILE)
    assert sorted(t.key for t in trials) == [(f"t-{i}", p) for i in range(4) for p in range(2)]
    first = next(t for t in trials if t.key == ("t-0", 0))
    assert (first.passed, first.reward, first.stop_reason, first.turns, first.attempts) == (
        True,
        1.0,
        StopReason.STOP,
        2,
        1,
    )
    assert first.tool_calls == 1 and first.tool_calls_by_tool == {"filesystem_read_file": 1}
    assert first.total_tokens > first.prompt_tokens > 0 and first.completion_tokens > 0

    trajectory_lines = (tmp_path / "out" / TRAJECTORIES_FILE).read_text().splitlines()
    assert len(trajectory_lines) == 8
    assert json.loads(trajectory_lines[0])["trajectory"]["tokens"]  # full token lists live here, not in trials

    on_disk = json.loads((tmp_path / "out" / RESULT_FILE).read_text())
    assert on_disk["summary"]["pass_at_1"]["mean"] == 0.5 and "trials" not in on_disk
    assert load_eval(tmp_path / "out").trials == result.trials


def test_resume_runs_only_the_unfinished_trials(engine, tokenizer_dir, task_file, tmp_path):
    engine.scripts["resumer"] = SOLVER
    spec = _spec(task_file, engine, tokenizer_dir, "resumer", tmp_path / "out")

    class Killed(BaseException):
        """The process dying mid-run. Not KeyboardInterrupt: asyncio re-raises that one while cancelling the other
        trials, which can escape pytest.raises depending on timing."""

    def kill_after_three(progress):
        if progress.done == 3:
            raise Killed

    with pytest.raises((Killed, BaseExceptionGroup)):
        run_eval(spec, progress=kill_after_three)
    finished = read_trials(tmp_path / "out" / TRIALS_FILE)
    # Trials run concurrently: one may still land between the kill and the cancellation of the others.
    assert 3 <= len(finished) < 8
    with (tmp_path / "out" / TRIALS_FILE).open("a") as handle:
        handle.write('{"task_id": "t-3", "pass_in')  # a line cut short by the kill
    assert not (tmp_path / "out" / RESULT_FILE).exists()

    before = len(engine.requests)
    result = run_eval(spec)
    remaining = 8 - len(finished)
    assert (result.timings.trials_resumed, result.timings.trials_run) == (len(finished), remaining)
    assert len(engine.requests) - before == remaining * 2  # two engine turns per remaining trial, none for finished
    trials = read_trials(tmp_path / "out" / TRIALS_FILE)
    assert sorted(t.key for t in trials) == [(f"t-{i}", p) for i in range(4) for p in range(2)]
    assert len((tmp_path / "out" / TRAJECTORIES_FILE).read_text().splitlines()) == 8
    assert result.summary.pass_at_1.mean == 0.5

    again = run_eval(spec)  # everything finished: nothing runs, the summary is rebuilt from the log
    assert (again.timings.trials_run, again.summary) == (0, result.summary)


def test_a_different_spec_refuses_the_folder(engine, tokenizer_dir, task_file, tmp_path):
    engine.scripts["solver"] = SOLVER
    run_eval(_spec(task_file, engine, tokenizer_dir, "solver", tmp_path / "out"))
    with pytest.raises(ValueError, match="different spec"):
        run_eval(_spec(task_file, engine, tokenizer_dir, "other-model", tmp_path / "out"))


def test_infra_failures_are_retried_then_recorded(engine, tokenizer_dir, task_file, tmp_path):
    engine.scripts["flaky"] = SOLVER
    engine.fail_first["flaky"] = 1  # the first request of the run fails: that trial succeeds on its second attempt
    flaky = run_eval(_spec(task_file, engine, tokenizer_dir, "flaky", tmp_path / "flaky", concurrency=1))
    assert sorted(t.attempts for t in flaky.trials) == [1] * 7 + [2]
    assert flaky.summary.pass_at_1.mean == 0.5 and flaky.counts["error_class"] == {"none": 8}

    engine.scripts["down"] = SOLVER
    engine.fail_first["down"] = 10**6
    down = run_eval(_spec(task_file, engine, tokenizer_dir, "down", tmp_path / "down", infra_retries=2))
    assert {(t.attempts, t.error_class, t.passed, t.reward) for t in down.trials} == {
        (3, ErrorClass.RETRYABLE_INFRA, False, 0.0)
    }
    assert down.counts["error_class"] == {"retryable_infra": 8}
    assert down.summary.pass_at_1.mean == 0.0


def test_bad_sources_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="needs a path"):
        TaskSource(kind=SourceKind.JSONL)
    (tmp_path / "tasks.jsonl").write_text("")
    source = TaskSource(kind=SourceKind.JSONL, path=tmp_path / "tasks.jsonl")
    with pytest.raises(ValueError, match="holds no tasks"):
        source.load()


def test_cli_run_resume_and_report(engine, tokenizer_dir, task_file, tmp_path, capsys):
    from cli.main import main

    engine.scripts["solver"] = SOLVER
    engine.scripts["silent"] = ["I do not know."]
    for model in ("solver", "silent"):
        argv = ["eval", "run", "--tasks", str(task_file), "--worlds", str(task_file.parent / "worlds")]
        argv += ["--engine-url", engine.url, "--model", model, "--tokenizer", str(tokenizer_dir), "--passes", "2"]
        argv += ["--out", str(tmp_path / model), "--mcp-backend", "in_process", "--max-turns", "3"]
        argv += ["--context-budget", "40000", "--max-tokens-per-turn", "200"]
        assert main(argv) == 0
    assert "Pass@1 0.500 ± 0.000" in capsys.readouterr().out
    assert main(["eval", "report", str(tmp_path / "solver"), "--baseline", str(tmp_path / "silent")]) == 0
    text = (tmp_path / "solver" / "report" / "report.md").read_text()
    assert "| silent | 4 | 2 | 0.000 ± 0.000 | 0.000 ± 0.000 | 0.000 (k=2) |" in text
    assert "| solver | Pass@1 | 0.000 | 0.500 | +0.500 |" in text


def test_code_only_and_terminal_harnesses_come_from_the_registry(engine, tokenizer_dir, task_file, tmp_path):
    # Code-only tools have no filesystem_read_file: the call fails, the scripted answer still grades the same.
    engine.scripts["solver"] = SOLVER
    code_only = run_eval(_spec(task_file, engine, tokenizer_dir, "solver", tmp_path / "code", harness="code_only"))
    assert code_only.summary.pass_at_1.mean == 0.5
    assert {t.harness for t in code_only.trials} == {"code_only"}
    assert all(t.tool_errors == 1 for t in code_only.trials)

    # A policy that answers at once leaves the terminal tasks undone: their verifiers give reward 0.
    engine.scripts["idle"] = ["Done."]
    spec = _spec(task_file, engine, tokenizer_dir, "idle", tmp_path / "terminal", harness="terminal", passes=1)
    spec = spec.model_copy(update={"tasks": TaskSource(kind=SourceKind.BUNDLED_TERMINAL, limit=2)})
    terminal = run_eval(spec)
    assert terminal.summary.n_tasks == 2 and terminal.summary.pass_at_1.mean == 0.0
    assert {(t.harness, t.domain, t.stop_reason, t.error_class) for t in terminal.trials} == {
        ("terminal", "terminal", StopReason.STOP, None)
    }


def test_data_folder_source_through_the_pooled_mcp_gateway(engine, tokenizer_dir, task_file, tmp_path):
    """The production path: a data folder (tasks/<split>.jsonl + worlds/) and stdio gateways in pooled sandboxes."""
    import shutil

    from envs.loaders import load_jsonl

    data = tmp_path / "data"
    shutil.copytree(task_file.parent / "worlds", data / "worlds")
    save_jsonl(load_jsonl(task_file)[:2], data / "tasks" / "heldout.jsonl")
    # The policy saw the filesystem tools only, listed compactly: the gateways must serve just those.
    policy = tmp_path / "policy"
    write_policy_harness(policy, PolicyHarness(apps=("filesystem",), harness=HarnessConfig(tool_listing="compact")))
    engine.scripts["gateway-solver"] = SOLVER
    spec = _spec(
        task_file,
        engine,
        tokenizer_dir,
        "gateway-solver",
        tmp_path / "out",
        tasks=TaskSource(kind=SourceKind.DATA, path=data, split="heldout"),
        mcp_backend=McpBackend.GATEWAY,
        passes=1,
        policy=policy,
    )
    result = run_eval(spec)
    # t-0 expects 412.5 (the solver's answer), t-1 expects 7.
    assert sorted((t.key, t.passed) for t in result.trials) == [(("t-0", 0), True), (("t-1", 0), False)]
    assert all(t.tool_calls_by_tool == {"filesystem_read_file": 1} for t in result.trials)
    first_prompt = engine.tokenizer.decode(next(r for r in engine.requests if r["model"] == "gateway-solver")["prompt"])
    assert "# Tools\nfilesystem_" in first_prompt and "sheets_" not in first_prompt and "mail_" not in first_prompt


# --- configuration errors: once, at once -----------------------------------------------------------------------------


def test_a_model_name_the_engine_does_not_serve_fails_before_any_trial(engine, tokenizer_dir, task_file, tmp_path):
    engine.scripts["served"] = SOLVER
    before = len(engine.requests)
    with pytest.raises(EvalConfigError, match=r"serves \[.*'served'.*\], not 'base'; pass --model"):
        run_eval(_spec(task_file, engine, tokenizer_dir, "base", tmp_path / "out"))
    assert len(engine.requests) == before and read_trials(tmp_path / "out" / TRIALS_FILE) == []
    nobody = _spec(task_file, engine, tokenizer_dir, "served", tmp_path / "down")
    nobody = nobody.model_copy(update={"engine": nobody.engine.model_copy(update={"base_url": _closed_url()})})
    with pytest.raises(EvalConfigError, match=r"cannot reach the engine at .*recipe engine serve"):
        run_eval(nobody)


def _closed_url() -> str:
    from envs.net import free_port

    return f"http://127.0.0.1:{free_port()}"


def test_a_context_budget_beyond_max_model_len_fails_before_any_trial(
    engine, tokenizer_dir, task_file, tmp_path, monkeypatch
):
    engine.scripts["short"] = SOLVER
    monkeypatch.setattr(engine, "max_model_len", 1024)
    before = len(engine.requests)
    with pytest.raises(
        EvalConfigError,
        match=r"context budget of 40000 tokens exceeds the max_model_len of 1024 .*pass --context-budget 1024.*"
        r"The budget comes from the command line",
    ):
        run_eval(_spec(task_file, engine, tokenizer_dir, "short", tmp_path / "out"))
    assert len(engine.requests) == before


def test_a_first_prompt_longer_than_the_budget_fails_before_any_trial(engine, tokenizer_dir, task_file, tmp_path):
    """No harness.json anywhere: the defaults list every app's tools as JSON schemas — far beyond 400 tokens."""
    from transformers import AutoTokenizer

    engine.scripts["tiny-context"] = SOLVER
    overrides = HarnessOverrides(max_turns=4, max_tokens_per_turn=200, context_budget_tokens=400)
    spec = _spec(task_file, engine, tokenizer_dir, "tiny-context", tmp_path / "out", harness_config=overrides)
    tools = asyncio.run(LocalToolSession(World(tmp_path)).list_tools())
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    size = len(prompt_ids(tokenizer, initial_messages(ANSWER_INSTRUCTIONS, "Question 0: what was Q1 revenue?"), tools))
    before = len(engine.requests)
    with pytest.raises(EvalConfigError) as error:
        run_eval(spec)
    assert f"the first prompt of task t-0 is {size} tokens (full tool listing, {len(tools)} tools)" in str(error.value)
    assert "context budget of 400 tokens, so every trial would fail" in str(error.value)
    assert (
        "from the harness defaults, with context_budget_tokens, max_tokens_per_turn, max_turns from the command line, "
        f"as no harness.json is in {tokenizer_dir} (pass --policy DIR" in str(error.value)
    )
    assert len(engine.requests) == before


def test_an_engine_rejection_stops_the_eval_once_without_retries(engine, tokenizer_dir, task_file, tmp_path):
    engine.scripts["strict"] = SOLVER
    engine.rejected.add("strict")
    spec = _spec(task_file, engine, tokenizer_dir, "strict", tmp_path / "out", concurrency=1, infra_retries=2)
    with pytest.raises(EvalConfigError, match=r"rejected a request for 'strict'.*HTTP 400.*max_tokens is too large"):
        run_eval(spec)
    assert len([r for r in engine.requests if r["model"] == "strict"]) == 1  # one 400, no retry, no other trial
    assert read_trials(tmp_path / "out" / TRIALS_FILE) == []


def _cli(engine: Engine, task_file: Path, model: str, out: Path, *extra: str) -> int:
    from cli.main import main

    argv = ["eval", "run", "--tasks", str(task_file), "--worlds", str(task_file.parent / "worlds")]
    argv += ["--engine-url", engine.url, "--model", model, "--passes", "2", "--out", str(out)]
    argv += ["--mcp-backend", "in_process", "--max-turns", "3", "--max-tokens-per-turn", "200", *extra]
    return main(argv)


def test_cli_exit_codes(engine, tokenizer_dir, task_file, tmp_path, capsys):
    tokenizer = ["--tokenizer", str(tokenizer_dir), "--context-budget", "40000"]
    engine.scripts["cli-down"] = SOLVER
    engine.fail_first["cli-down"] = 10**6
    assert _cli(engine, task_file, "cli-down", tmp_path / "down", "--infra-retries", "0", *tokenizer) == 1
    err = capsys.readouterr().err
    assert "every trial failed ({'retryable_infra': 8}); first error (t-0): /v1/completions: HTTP 500" in err

    assert _cli(engine, task_file, "nobody", tmp_path / "nobody", *tokenizer) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"recipe: error: the engine at {engine.url} serves [")

    engine.scripts["cli-strict"] = SOLVER
    engine.rejected.add("cli-strict")
    assert _cli(engine, task_file, "cli-strict", tmp_path / "strict", "--concurrency", "1", *tokenizer) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "rejected a request for 'cli-strict'" in err[0] and "Traceback" not in err[0]

    no_harness = tmp_path / "empty-policy"
    no_harness.mkdir()
    assert _cli(engine, task_file, "served", tmp_path / "p", "--policy", str(no_harness), *tokenizer) == 2
    assert f"--policy {no_harness} holds no harness.json" in capsys.readouterr().err


# --- the policy's harness.json, served by our engine ------------------------------------------------------------------

TINY = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=1024)
POLICY_HARNESS = PolicyHarness(
    apps=("filesystem",),
    harness=HarnessConfig(
        tool_listing=ToolListing.SIGNATURES,
        system_prompt="Use the tools.",
        max_turns=3,
        max_tokens_per_turn=8,
        context_budget_tokens=1024,
        agent_timeout_s=60,
    ),
)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    """A tiny policy (random weights) whose harness.json asks for signatures of the filesystem tools only."""
    tools = asyncio.run(LocalToolSession(World(Path(".")), apps=POLICY_HARNESS.apps).list_tools())
    listing = compact_system_prompt("Use the tools.", tools, ToolListing.SIGNATURES)
    corpus = [listing, *SOLVER, *(f"Question {i}: what was Q1 revenue?" for i in range(4))] * 20
    model, tokenizer = bootstrap_policy(corpus, TINY, vocab_size=600)
    return save_policy(model, tokenizer, tmp_path_factory.mktemp("models") / "policy", harness=POLICY_HARNESS)


@contextmanager
def serving(policy_dir: Path, max_model_len: int | None = None) -> Iterator[str]:
    model, tokenizer = load_policy(policy_dir)
    engine = EngineImpl(model, tokenizer, EngineConfig(max_num_seqs=4, torch_threads=1, max_model_len=max_model_len))
    with serve_in_thread(create_app(engine, default_served_name(policy_dir))) as url:
        yield url


def _policy_spec(url: str, model: str, task_file: Path, out: Path, **extra) -> EvalSpec:
    fields = {
        "tasks": TaskSource(kind=SourceKind.JSONL, path=task_file, worlds=task_file.parent / "worlds"),
        "mcp_backend": McpBackend.IN_PROCESS,
        "engine": EngineSpec(base_url=url, model=model, timeout_s=30),
        "passes": 1,
        "out_dir": out,
    }
    return EvalSpec(**(fields | extra))


def test_the_policys_harness_json_is_what_the_eval_runs(policy_dir, task_file, tmp_path):
    served = str(policy_dir)  # `recipe engine serve --model DIR` serves the name DIR, as vLLM does
    _, tokenizer = load_policy(policy_dir)
    tools = asyncio.run(LocalToolSession(World(tmp_path), apps=("filesystem",)).list_tools())
    with serving(policy_dir) as url:
        with pytest.raises(EvalConfigError, match=f"serves \\['{served}'\\], not 'base'; pass --model {served}$"):
            run_eval(_policy_spec(url, "base", task_file, tmp_path / "base"))
        with pytest.raises(EvalConfigError, match=r"budget of 4096 tokens exceeds the max_model_len of 1024"):
            run_eval(
                _policy_spec(
                    url,
                    served,
                    task_file,
                    tmp_path / "long",
                    harness_config=HarnessOverrides(context_budget_tokens=4096),
                )
            )
        overrides = HarnessOverrides(max_turns=1)  # flags go on top of harness.json
        result = run_eval(_policy_spec(url, served, task_file, tmp_path / "out", harness_config=overrides))
    expected = POLICY_HARNESS.model_copy(update={"harness": POLICY_HARNESS.harness.model_copy(update={"max_turns": 1})})
    assert result.harness == expected and result.harness_source == policy_dir / HARNESS_FILE
    spec_json = json.loads((tmp_path / "out" / "spec.json").read_text())
    assert spec_json["resolved_harness"] == expected.model_dump(mode="json")
    on_disk = json.loads((tmp_path / "out" / RESULT_FILE).read_text())
    assert on_disk["harness"]["harness"]["tool_listing"] == "signatures" and on_disk["harness"]["apps"] == [
        "filesystem"
    ]
    for trial in result.trials:
        prompt = initial_messages("Use the tools.", f"Question {trial.task_id[-1]}: what was Q1 revenue?")
        assert trial.prompt_tokens == len(prompt_ids(tokenizer, prompt, tools, ToolListing.SIGNATURES))
        assert trial.turns == 1 and trial.completion_tokens <= 8 and trial.error_class is not ErrorClass.RETRYABLE_INFRA


def test_harness_json_beyond_the_served_context_names_the_file(policy_dir, task_file, tmp_path):
    with serving(policy_dir, max_model_len=512) as url, pytest.raises(EvalConfigError) as error:
        run_eval(_policy_spec(url, str(policy_dir), task_file, tmp_path / "out"))
    message = str(error.value)
    assert "the context budget of 1024 tokens exceeds the max_model_len of 512" in message
    assert message.endswith(f"The budget comes from the policy's {policy_dir / HARNESS_FILE}")


# --- choosing tasks by tier; the default eval folder -----------------------------------------------------------------


def test_a_tier_filter_keeps_its_tiers_before_the_limit(task_file):
    toy = TaskSource(kind=SourceKind.JSONL, path=task_file, tiers=(Tier.TOY,))
    assert [t.task_id for t in toy.load()] == ["t-0", "t-2"]  # t-1, t-3 are standard
    assert [t.task_id for t in toy.model_copy(update={"limit": 1}).load()] == ["t-0"]
    assert len(toy.model_copy(update={"tiers": (Tier.TOY, Tier.STANDARD)}).load()) == 4
    with pytest.raises(EvalConfigError, match=r"no task of tier deliverable \(it holds: standard 2, toy 2\)$"):
        toy.model_copy(update={"tiers": (Tier.DELIVERABLE,)}).load()


def test_the_tier_filter_joins_the_identity_only_when_set(engine, tokenizer_dir, task_file, tmp_path):
    spec = _spec(task_file, engine, tokenizer_dir, "solver", tmp_path / "out")
    assert "tiers" not in spec.identity()["tasks"]  # folders written before the filter existed still resume
    toy = spec.model_copy(update={"tasks": spec.tasks.model_copy(update={"tiers": (Tier.TOY,)})})
    assert toy.identity()["tasks"]["tiers"] == ["toy"]


def _cli_default_out(engine: Engine, task_file: Path, tokenizer_dir: Path, *extra: str) -> int:
    from cli.main import main

    argv = ["eval", "run", "--tasks", str(task_file), "--worlds", str(task_file.parent / "worlds")]
    argv += ["--engine-url", engine.url, "--model", "solver", "--tokenizer", str(tokenizer_dir), "--passes", "2"]
    argv += ["--mcp-backend", "in_process", "--max-turns", "3", "--context-budget", "40000", *extra]
    return main(argv)


def test_cli_tier_filter_default_folder_and_summary_line(
    engine, tokenizer_dir, task_file, tmp_path, monkeypatch, capsys
):
    engine.scripts["solver"] = SOLVER
    monkeypatch.chdir(tmp_path)
    assert _cli_default_out(engine, task_file, tokenizer_dir, "--tier", "toy") == 0
    lines = capsys.readouterr().out.splitlines()
    (folder,) = (tmp_path / "runs" / "evals").glob("solver-mcp-*")
    assert lines[0] == f"eval folder: {folder}  (the same command resumes it)"
    assert lines[1] == f"2 tasks of tier toy × 2 passes → {folder}"
    assert lines[2].startswith("Pass@1 1.000 ± 0.000")  # t-0 and t-2 expect the solver's 412.5

    before = len(engine.requests)
    assert _cli_default_out(engine, task_file, tokenizer_dir, "--tier", "toy") == 0  # the same folder: nothing to run
    assert len(engine.requests) == before and capsys.readouterr().out.splitlines()[0].endswith(
        f"{folder}  (the same command resumes it)"
    )
    assert _cli_default_out(engine, task_file, tokenizer_dir, "--passes", "1") == 0  # another eval, another folder
    assert "4 tasks of tiers standard 2, toy 2 × 1 pass → " in capsys.readouterr().out
    assert len(list((tmp_path / "runs" / "evals").glob("solver-mcp-*"))) == 2


# --- a pipeline stage's eval, run again (`recipe eval run --run RUN --stage STAGE`) -----------------------------------

STAGE_HARNESS = HarnessConfig(max_turns=4, max_tokens_per_turn=200, context_budget_tokens=40_000)


def _stage_evals(
    root: Path,
    engine: Engine,
    tokenizer_dir: Path,
    task_file: Path,
    worlds: Path | None = None,
    homes: dict[str, Path] | None = None,
) -> dict[str, Path]:
    """A run folder as the pipeline leaves one: run.json and the hero's evals of its toy tasks, base and trained, each
    as ``tasks.evaluation`` runs it (the tasks.jsonl in its work folder, apps in process, harness seed 1 = the run's
    seed + 1, the policy's harness.json). ``worlds`` and ``homes`` (a policy folder per label) say where those live
    (default: beside the tasks, and ``root/policies``). The policies' folders by label."""
    from envs.loaders import load_jsonl
    from evals.run_folder import TASKS_FILE
    from tasks.run_store import RunStore

    store = RunStore.create(root, "local", {}, "hash", run_id="r1")
    policies = {}
    for label, script in (("base", ["I do not know."]), ("trained", SOLVER)):
        policies[label] = (homes or {}).get(label) or root / "policies" / label
        write_policy_harness(policies[label], PolicyHarness(apps=("filesystem",), harness=STAGE_HARNESS))
        folder = store.root / "6-hero" / f"eval-heldout-{label}-0123abcd"
        save_jsonl([t for t in load_jsonl(task_file) if t.tier is Tier.TOY], folder / TASKS_FILE)
        engine.scripts[f"stage-{label}"] = script
        spec = EvalSpec(
            tasks=TaskSource(
                kind=SourceKind.JSONL, path=folder / TASKS_FILE, worlds=worlds or task_file.parent / "worlds"
            ),
            engine=EngineSpec(base_url=engine.url, model=f"stage-{label}", tokenizer=str(tokenizer_dir)),
            passes=2,
            out_dir=folder,
            concurrency=4,
            harness_config=HarnessOverrides(seed=1),
            policy=policies[label],
            mcp_backend=McpBackend.IN_PROCESS,
        )
        run_eval(spec)
    return policies


def _rerun(engine: Engine, run: Path, model: str, *extra: str) -> int:
    from cli.main import main

    return main(
        ["eval", "run", "--run", str(run), "--stage", "hero", "--engine-url", engine.url, "--model", model, *extra]
    )


def test_a_stage_eval_runs_again_with_its_tasks_harness_passes_and_seeds(
    engine, tokenizer_dir, task_file, tmp_path, monkeypatch, capsys
):
    from envs.harness.agent import request_seed
    from evals.seeds import trial_seed

    policies = _stage_evals(tmp_path / "runs", engine, tokenizer_dir, task_file)
    stage_folder = tmp_path / "runs" / "r1" / "6-hero" / "eval-heldout-trained-0123abcd"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    engine.scripts["rerun"] = SOLVER
    # The served policy (--policy, as with --served-model-name) picks the trained eval of the two.
    assert _rerun(engine, tmp_path / "runs" / "r1", "rerun", "--policy", str(policies["trained"])) == 0
    out = capsys.readouterr().out
    (folder,) = (elsewhere / "runs" / "evals").glob("r1-hero-heldout-trained-*")
    assert f"running again the eval in {stage_folder} (heldout/trained of stage hero)" in out
    assert f"2 tasks of tier toy × 2 passes → {folder}\nPass@1 1.000 ± 0.000" in out
    assert f"the stage's eval ({stage_folder}): Pass@1 1.000 ± 0.000" in out
    assert "this run − the stage's: Pass@1 +0.000, 95% CI [+0.000, +0.000]: within noise" in out

    # Exactly the stage's eval: the same spec but for the served model's name, and the same seed per trial and turn.
    stage_spec, rerun_spec = (json.loads((f / "spec.json").read_text()) for f in (stage_folder, folder))
    assert {k: v for k, v in rerun_spec.items() if k != "engine"} == {
        k: v for k, v in stage_spec.items() if k != "engine"
    }
    assert rerun_spec["engine"] == stage_spec["engine"] | {"model": "rerun"}
    seeds = {
        model: sorted(r["seed"] for r in engine.requests if r["model"] == model) for model in ("stage-trained", "rerun")
    }
    trials = [trial_seed(1, task, p) for task in ("t-0", "t-2") for p in range(2)]  # the run's seed + 1 = 1
    expected = sorted(request_seed(seed, 0, turn) for seed in trials for turn in range(2))  # tool call, answer
    assert seeds["rerun"] == seeds["stage-trained"] == expected


def test_which_stage_eval_is_run_again(engine, tokenizer_dir, task_file, tmp_path, monkeypatch, capsys):
    _stage_evals(tmp_path / "runs", engine, tokenizer_dir, task_file)
    monkeypatch.chdir(tmp_path)
    engine.scripts["rerun-base"] = ["I do not know."]
    run = tmp_path / "runs" / "r1"
    assert _rerun(engine, run, "rerun-base") == 2  # a served name, no policy folder: which of the two is unclear
    (err,) = capsys.readouterr().err.splitlines()
    assert "several of the stage's evals match: heldout/base (policy " in err and "; heldout/trained (policy " in err
    assert "Choose one with --suite SUITE --label LABEL" in err

    assert _rerun(engine, run, "rerun-base", "--label", "base", "--out", str(tmp_path / "base")) == 0
    assert "(heldout/base of stage hero)" in capsys.readouterr().out
    assert load_eval(tmp_path / "base").summary.pass_at_1.mean == 0.0

    # A stage run again after a config change leaves older work folders: the newest per suite and label counts.
    import os
    import shutil

    stale = run / "6-hero" / "eval-heldout-base-deadbeef"
    shutil.copytree(run / "6-hero" / "eval-heldout-base-0123abcd", stale)
    for path in stale.iterdir():
        os.utime(path, (0, 0))
    assert _rerun(engine, run, "rerun-base", "--label", "base", "--out", str(tmp_path / "base")) == 0
    assert "eval-heldout-base-0123abcd (heldout/base" in capsys.readouterr().out


def test_a_stage_eval_that_cannot_run_the_same_is_refused(engine, tokenizer_dir, task_file, tmp_path, capsys):
    policies = _stage_evals(tmp_path / "runs", engine, tokenizer_dir, task_file)
    run = tmp_path / "runs" / "r1"
    cases = {
        ("--label", "trained", "--passes", "1", "--seed", "3"): "passes and seeds, so --run refuses: --passes, --seed",
        ("--label", "nobody"): "none of the stage's evals match",
    }
    for extra, says in cases.items():
        assert _rerun(engine, run, "rerun", *extra) == 2
        assert says in capsys.readouterr().err

    changed = PolicyHarness(apps=("filesystem",), harness=STAGE_HARNESS.model_copy(update={"max_turns": 2}))
    write_policy_harness(policies["trained"], changed)  # edited since the stage ran
    assert _rerun(engine, run, "rerun", "--label", "trained", "--out", str(tmp_path / "x")) == 2
    err = capsys.readouterr().err
    assert "the harness settings now differ from those the eval in" in err and "ran with (max_turns)" in err


def test_a_run_copied_to_another_checkout_evaluates_without_the_first(
    engine, tokenizer_dir, task_file, tmp_path, monkeypatch, capsys
):
    """Checkout A ran the stage: worlds in its content-addressed ``data/env-<digest>``, the base in ``models/base``,
    the trained policy in the run folder — all recorded as A's absolute paths. The run folder copied into checkout B
    (which built the same data and base) and A deleted: the eval runs again from B alone, the same numbers; without
    B's data it is refused, naming every place it looked."""
    import shutil

    first, second = tmp_path / "a", tmp_path / "b"
    digest = "env-0123456789abcdef"
    worlds = first / "data" / digest / "worlds"
    shutil.copytree(task_file.parent / "worlds", worlds)
    homes = {"base": first / "models" / "base" / "feedc0de", "trained": first / "runs" / "r1" / "6-hero" / "policy"}
    _stage_evals(first / "runs", engine, tokenizer_dir, task_file, worlds=worlds, homes=homes)
    shutil.copytree(first / "runs" / "r1", second / "runs" / "r1")  # the run, and what B built for itself
    shutil.copytree(first / "data", second / "data")
    shutil.copytree(first / "models", second / "models")
    shutil.rmtree(first)
    monkeypatch.chdir(second)
    engine.scripts["moved"] = SOLVER
    trained = second / "runs" / "r1" / "6-hero" / "policy"
    assert _rerun(engine, Path("runs/r1"), "moved", "--policy", str(trained), "--out", str(tmp_path / "t")) == 0
    out = capsys.readouterr().out
    assert "(heldout/trained of stage hero)" in out and "Pass@1 1.000 ± 0.000" in out
    assert json.loads((tmp_path / "t" / "spec.json").read_text())["tasks"]["worlds"] == str(
        second / "data" / digest / "worlds"
    )
    engine.scripts["moved-base"] = ["I do not know."]
    assert _rerun(engine, Path("runs/r1"), "moved-base", "--label", "base", "--out", str(tmp_path / "b0")) == 0
    assert json.loads((tmp_path / "b0" / "spec.json").read_text())["policy"] == str(
        second / "models" / "base" / "feedc0de"
    )

    shutil.rmtree(second / "data")  # B never built the data
    assert _rerun(engine, Path("runs/r1"), "moved-base", "--label", "base", "--out", str(tmp_path / "b1")) == 2
    err = capsys.readouterr().err
    assert f"the eval's worlds is in none of {worlds}, {second / 'data' / digest / 'worlds'}" in err
    assert "running the run's profile once in this checkout builds the same one); or pass --worlds PATH" in err
