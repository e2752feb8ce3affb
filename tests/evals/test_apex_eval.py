"""An APEX-Agents release, end to end through `recipe eval run`: the fixture release (tests/envs/data/apex_release)
loads, its worlds unzip, a scripted policy answers, and a real OpenAI-compatible judge server on 127.0.0.1 grades it;
then `recipe eval export-atif` writes the trajectories as ATIF.

The judge is deterministic: a criterion passes when every number in it appears in the agent's final answer. It records
each request, so the tests see the strict rules it was given and that a task whose required file is missing was
never sent to it. The engine is the scripted-policy pattern of ``tests/evals/test_runner.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envs.net import serve_in_thread
from tests.judge_server import JudgeMode, RuleJudge, judge_server
from trainer.tokenizer import save_tokenizer, train_tokenizer

RELEASE = Path(__file__).parents[1] / "envs" / "data" / "apex_release"
READ_Q1 = '<tool_call>\n{"name": "filesystem_read_file", "arguments": {"path": "notes/q1.txt"}}\n</tool_call>'
SOLVER = [READ_Q1, "Q1 revenue was 412.5 million, up 9 percent."]
HALF = [READ_Q1, "Q1 revenue was 412.5 million."]


@dataclass
class Servers:
    tokenizer: object
    scripts: dict[str, list[str]] = field(default_factory=lambda: {"solver": SOLVER, "half": HALF})
    judge: RuleJudge = field(default_factory=RuleJudge)
    engine_url: str = ""
    judge_url: str = ""

    def engine(self) -> FastAPI:
        app, tok = FastAPI(), self.tokenizer

        @app.get("/v1/models")
        async def models() -> dict:
            return {"object": "list", "data": [{"id": m, "max_model_len": 100_000} for m in self.scripts]}

        @app.post("/v1/completions")
        async def completions(request: Request) -> JSONResponse:
            body = await request.json()
            script = self.scripts[body["model"]]
            turn = tok.decode(body["prompt"], skip_special_tokens=False).count("<|im_start|>assistant") - 1
            ids = [*tok.encode(script[min(turn, len(script) - 1)], add_special_tokens=False), tok.eos_token_id]
            choice = {"token_ids": ids, "logprobs": {"token_logprobs": [-0.1] * len(ids)}, "finish_reason": "stop"}
            return JSONResponse({"choices": [choice]})

        return app


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    corpus = [f"{READ_Q1} Q1 revenue was {i * 37 % 900}.5 million, up {i} percent." for i in range(200)]
    return save_tokenizer(train_tokenizer(corpus, vocab_size=600), tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def servers(tokenizer_dir):
    from transformers import AutoTokenizer

    state = Servers(AutoTokenizer.from_pretrained(tokenizer_dir))
    with serve_in_thread(state.engine()) as engine_url, judge_server(state.judge) as judge_url:
        state.engine_url, state.judge_url = engine_url, judge_url
        yield state


def _run(servers: Servers, tokenizer_dir: Path, model: str, tmp_path: Path, *extra: str) -> int:
    from cli.main import main

    argv = ["eval", "run", "--tasks", f"apex:{RELEASE}", "--worlds", str(tmp_path / "worlds")]
    argv += ["--engine-url", servers.engine_url, "--model", model, "--tokenizer", str(tokenizer_dir)]
    argv += ["--passes", "2", "--out", str(tmp_path / model), "--mcp-backend", "in_process", "--max-turns", "3"]
    argv += ["--context-budget", "40000", "--max-tokens-per-turn", "200", *extra]
    return main(argv)


def test_an_apex_release_grades_through_a_local_judge_end_to_end(servers, tokenizer_dir, tmp_path, capsys):
    from evals.run_folder import load_eval

    judge = ["--judge-url", servers.judge_url, "--judge-model", "judge"]
    assert _run(servers, tokenizer_dir, "solver", tmp_path, *judge) == 0
    result = load_eval(tmp_path / "solver")
    by_task = {(t.task_id, t.pass_index): t for t in result.trials}
    assert [by_task["apex-revenue", p].passed for p in (0, 1)] == [True, True]
    memo = by_task["apex-memo", 0]
    assert (memo.passed, memo.reward) == (False, 0.0)
    # 2 criteria × 2 passes of apex-revenue reached the judge; apex-memo wrote no .docx, so it never did.
    assert len(servers.judge.judged) == 4
    assert all("States Q1 revenue" in body["messages"][-1]["content"] for body in servers.judge.judged)
    system = servers.judge.judged[0]["messages"][0]["content"]
    assert "every part of it holds" in system and "claims about files" in system
    assert "World changes: no files changed" in servers.judge.judged[0]["messages"][-1]["content"]
    assert (tmp_path / "worlds" / "world_fixture_ib.apex-memo" / "filesystem" / "inputs" / "brief.txt").is_file()

    servers.judge.judged.clear()  # half the answer: the conjunct "9 percent" fails only the second criterion
    assert _run(servers, tokenizer_dir, "half", tmp_path, *judge) == 0
    half = {(t.task_id, t.pass_index): t for t in load_eval(tmp_path / "half").trials}
    assert (half["apex-revenue", 0].passed, half["apex-revenue", 0].reward) == (False, 0.5)


def test_without_a_judge_the_eval_stops_before_any_trial(servers, tokenizer_dir, tmp_path, capsys):
    assert _run(servers, tokenizer_dir, "solver", tmp_path) == 2
    err = capsys.readouterr().err
    assert "llm_judge criteria" in err and "--judge-url" in err
    trials = tmp_path / "solver" / "trials.jsonl"
    assert not (trials.exists() and trials.read_text())


def test_export_atif_writes_each_trial_as_an_atif_document(servers, tokenizer_dir, tmp_path):
    from cli.main import main

    judge = ["--judge-url", servers.judge_url, "--judge-model", "judge"]
    assert _run(servers, tokenizer_dir, "solver", tmp_path, *judge) == 0
    assert main(["eval", "export-atif", str(tmp_path / "solver")]) == 0
    files = sorted((tmp_path / "solver" / "atif").glob("*/agent/trajectory.json"))
    assert [f.parts[-3] for f in files] == [f"{t}__pass{p}" for t in ("apex-memo", "apex-revenue") for p in (0, 1)]
    doc = json.loads(files[2].read_text())
    assert doc["schema_version"] == "ATIF-v1.4" and doc["session_id"] == "apex-revenue/pass0"
    assert doc["agent"]["model_name"] == "solver"
    user, first, last = doc["steps"][0], doc["steps"][1], doc["steps"][-1]
    assert user["source"] == "user" and "What was Q1 revenue?" in user["message"]
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    (call,) = first["tool_calls"]
    assert call["function_name"] == "filesystem_read_file" and call["arguments"] == {"path": "notes/q1.txt"}
    assert first["observation"]["results"][0]["source_call_id"] == call["tool_call_id"]
    assert "412.5" in first["observation"]["results"][0]["content"]
    assert "up 9 percent" in last["message"]
    assert len(last["metrics"]["logprobs"]) == last["metrics"]["completion_tokens"]
    assert doc["final_metrics"]["extra"]["passed"] is True and doc["final_metrics"]["extra"]["reward"] == 1.0


@pytest.mark.parametrize(
    ("mode", "agreement", "empty_passes"), [(JudgeMode.RULE, 1.0, 0), (JudgeMode.YES, 1.0, 2), (JudgeMode.FLIP, 0.5, 2)]
)
def test_judge_audit_re_judges_graded_samples_and_asks_about_an_empty_answer(
    servers, tokenizer_dir, tmp_path, mode, agreement, empty_passes
):
    from envs.judge_audit import JUDGE_AUDIT_FILE, JudgeAudit
    from evals.run_folder import load_eval

    # one trial at a time: the flipping judge inverts every other request, so its order must be the audit's own
    judge = ["--judge-url", servers.judge_url, "--judge-model", "judge", "--judge-audit", "2", "--concurrency", "1"]
    servers.judge.mode, servers.judge.judged = mode, []
    try:
        assert _run(servers, tokenizer_dir, "solver", tmp_path, *judge) == 0
    finally:
        servers.judge.mode = JudgeMode.RULE
    audit = JudgeAudit.model_validate_json((tmp_path / "solver" / JUDGE_AUDIT_FILE).read_text())
    # 2 of the 4 graded calls audited: each re-judged twice and asked once with an empty answer
    assert len(audit.samples) == 2 and len(servers.judge.judged) == 4 + 2 * 3
    assert (audit.agreement, audit.empty_passes, audit.failed_calls) == (agreement, empty_passes, 0)
    if mode is JudgeMode.RULE:  # auditing never changes a grade: the first verdict is the one returned
        assert all(trial.passed for trial in load_eval(tmp_path / "solver").trials if trial.task_id == "apex-revenue")


def test_judge_audit_needs_a_judge(servers, tokenizer_dir, tmp_path, capsys):
    assert _run(servers, tokenizer_dir, "solver", tmp_path, "--judge-audit", "2") == 2
    assert "--judge-audit needs a judge" in capsys.readouterr().err
