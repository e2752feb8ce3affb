"""MCQ suite: answer extraction, loader errors, the bundled set, and runs against a scripted HTTP engine."""

import json
import math
import operator
import re

import pytest
from fastapi import FastAPI, Request

from envs.net import serve_in_thread
from evals.mcq import (
    BUNDLED_MCQ,
    McqApi,
    McqConfig,
    McqEngineError,
    McqLoadError,
    extract_choice,
    format_prompt,
    load_mcq,
    run_mcq,
)
from evals.seeds import trial_seed


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Answer: C", "C"),
        ("answer:c", "C"),
        ("The answer is c.", "C"),
        ("I think it is (B).", "B"),
        ("Options A and B are wrong, so the answer is (D)", "D"),
        ("Answer: B\nWait, re-checking... Answer: A", "A"),  # the last explicit statement wins
        ("A quick check shows D", "D"),  # last stand-alone letter; the article "A" comes first
        ("**Answer: (B)**", "B"),
        ("B", "B"),
        ("Answer: E", None),  # out of range for 4 choices, and no other letter
        ("I am not sure.", None),  # "I" is no choice among A-D
        ("", None),
        ("the answer is 42", None),
    ],
)
def test_extract_choice(reply, expected):
    assert extract_choice(reply, 4) == expected


BINARY = re.compile(r"What is (\d+) (\*\*|[*/+-]) (\d+)\?")
OPERATORS = {"*": operator.mul, "/": operator.truediv, "+": operator.add, "-": operator.sub, "**": operator.pow}


def _write(tmp_path, *rows) -> object:
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


GOOD = {"question": "2 + 2?", "choices": ["3", "4", "5"], "answer": "B"}


def test_loader_accepts_letter_index_and_text(tmp_path):
    rows = load_mcq(
        _write(tmp_path, GOOD, GOOD | {"id": "x", "answer": 1}, GOOD | {"id": "y", "answer": "4"}, GOOD | {"id": "z"})
    )
    assert [r.answer for r in rows] == [1, 1, 1, 1]
    assert rows[0].id == "line-1" and rows[0].answer_letter == "B"
    assert format_prompt(rows[0]).splitlines()[:5] == ["2 + 2?", "", "A. 3", "B. 4", "C. 5"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("{not json", r"q\.jsonl, line 2: invalid JSON"),
        ({"choices": ["a", "b"], "answer": 0}, "line 2: field 'question' is required"),
        (GOOD | {"choices": ["only"]}, "line 2: field 'choices' needs 2 to 26"),
        (GOOD | {"answer": 3}, "line 2: field 'answer': index 3 is out of range for 3 choices"),
        (GOOD | {"answer": "F"}, "line 2: field 'answer': 'F' is not a letter A-C nor a choice"),
        (GOOD | {"answer": 1.5}, "line 2: field 'answer': must be a letter, an index or a choice's text"),
        (GOOD | {"explanation": "x"}, "line 2: unknown field 'explanation'"),
    ],
)
def test_loader_errors_name_file_line_and_field(tmp_path, row, message):
    with pytest.raises(McqLoadError, match=message):
        load_mcq(_write(tmp_path, GOOD | {"id": "first"}, row))


def test_loader_refuses_duplicate_ids_and_empty_files(tmp_path):
    with pytest.raises(McqLoadError, match="id 'a' occurs more than once"):
        load_mcq(_write(tmp_path, GOOD | {"id": "a"}, GOOD | {"id": "a"}))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(McqLoadError, match="holds no questions"):
        load_mcq(tmp_path / "empty.jsonl")


def test_bundled_set_loads_with_verifiable_arithmetic():
    rows = load_mcq(BUNDLED_MCQ)
    checked = 0
    assert len(rows) == 40
    assert {r.subject for r in rows} == {"arithmetic", "unit_conversion", "finance"}
    for row in rows:
        match = BINARY.fullmatch(row.question)
        if match:
            left, op, right = match.groups()
            assert float(row.choices[row.answer]) == OPERATORS[op](int(left), int(right)), row.id
            checked += 1
    assert checked == 8  # 17*23, 144/12, 2**10, 1000-387, 3**4, 25*16, 999+1001, 81/27


# --- against an engine -----------------------------------------------------------------------------------------------


SEEN_SEEDS: set[int] = set()


def _answer_for(prompt: str, seed: int) -> str:
    """Pass 0 answers every question right; pass 1 only those whose question holds "2". The pass is read off the
    seed: each (question, pass) has its own (``trial_seed`` of the config's seed 0)."""
    rows = {format_prompt(r): r for r in load_mcq(BUNDLED_MCQ)[:4]}
    row = rows[prompt.removesuffix("\n\nAnswer:")]
    SEEN_SEEDS.add(seed)
    assert seed in (trial_seed(0, row.id, 0), trial_seed(0, row.id, 1)), "a seed of neither pass"
    if seed == trial_seed(0, row.id, 0) or "2" in row.question:
        return f"Let me think. The answer is {row.answer_letter}."
    return "No idea."


@pytest.fixture(scope="module")
def engine_url():
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "m"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict:
        body = await request.json()
        text = _answer_for(body["messages"][0]["content"], body["seed"])
        return {"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict:
        body = await request.json()
        return {"choices": [{"text": _answer_for(body["prompt"], body["seed"]), "finish_reason": "stop"}]}

    with serve_in_thread(app) as url:
        yield url


@pytest.mark.parametrize("api", list(McqApi))
def test_run_mcq_accuracy_over_passes(engine_url, api):
    rows = load_mcq(BUNDLED_MCQ)[:4]
    with_two = sum("2" in r.question for r in rows)
    result = run_mcq(rows, McqConfig(engine_url, "m", passes=2, temperature=0.0, api=api))
    # pass 0: 4/4 right; pass 1: only the questions with a "2" in them.
    assert result.accuracy_by_pass == [1.0, with_two / 4]
    assert 0 < with_two < 4
    assert math.isclose(result.accuracy.mean, (1.0 + with_two / 4) / 2)
    assert math.isclose(result.accuracy.se, abs(1.0 - with_two / 4) / 2)  # std of 2 values = |a−b|/√2, SE = std/√2
    assert result.no_answer_rate == (4 - with_two) / 8
    assert len(result.trial_results()) == 8 and result.trial_results()[0].domain == rows[0].subject
    assert len(SEEN_SEEDS) >= 8  # every (question, pass) sampled with a seed of its own


def test_run_mcq_raises_on_engine_errors(engine_url):
    with pytest.raises(McqEngineError, match="HTTP 404"):
        run_mcq(load_mcq(BUNDLED_MCQ)[:1], McqConfig(engine_url + "/missing", "m", passes=1))


def test_cli_mcq_saves_its_result_by_default_and_prints_one_whole_line(engine_url, tmp_path, monkeypatch, capsys):
    from cli.main import main

    rows = tmp_path / "four.jsonl"
    rows.write_text("".join(row.model_dump_json(exclude={"subject"}) + "\n" for row in load_mcq(BUNDLED_MCQ)[:4]))
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "mcq", "--engine-url", engine_url, "--model", "m", "--passes", "2", "--file", str(rows)]) == 0
    (saved,) = (tmp_path / "runs" / "evals").glob("mcq-m-*/mcq.json")
    result = json.loads(saved.read_text())
    assert result["passes"] == 2 and len(result["accuracy_by_pass"]) == 2 and len(result["answers"]) == 8
    (line,) = capsys.readouterr().out.splitlines()  # longer than a terminal's 80 columns, and still one line
    rate = f"{result['no_answer_rate']:.1%}"
    assert line.startswith("MCQ accuracy ") and f"over 2 passes of 4 questions (no answer extracted: {rate}) → " in line
    assert line.endswith(f"{saved}") and len(line) > 80
