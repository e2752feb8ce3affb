"""The MCQ regression suite: GPQA / HLE-style multiple-choice questions asked to an engine, accuracy per pass.

RECIPE "Evaluation": RL on agent tasks must not cost general knowledge; the check is multiple-choice accuracy
"within error bars" of the base model. Rows are JSONL objects ``{"question", "choices": [...], "answer"}`` (optional
``id``, ``subject``); ``answer`` is a letter (``"C"``), a 0-based index (``2``) or the text of one choice. A single
letter within the choices counts as a letter, so a choice whose text is a lone letter must be given by index.

* ``load_mcq(path)`` — validated rows; a bad row raises ``McqLoadError`` naming the file, the line and the field.
* ``format_prompt(row)`` — the question with choices lettered A, B, C, … and the "Answer: X" instruction.
* ``extract_choice(text, n_choices)`` — the letter a reply picked: the last "answer is C" / "Answer: C", else the last
  "(C)", else the last stand-alone capital letter in range; ``None`` (scored wrong) when there is none.
* ``run_mcq(rows, McqConfig(engine_url, model, passes, temperature))`` — every row once per pass via
  ``/v1/chat/completions`` or ``/v1/completions`` (text prompt), over ``envs.openai_http.ApiClient``; accuracy per
  pass → mean ± SE over passes (``evals.stats.estimate``).

``BUNDLED_MCQ`` is a synthetic set of 40 questions (arithmetic, unit conversion, finance definitions) whose answers
can be checked by hand: a smoke-level regression check, not a benchmark.
"""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envs.errors import RecipeError
from envs.harness.parsing import strip_think
from envs.jsonio import JsonError, json_lines, parse_json
from envs.openai_http import ApiClient, ApiError, first_choice
from envs.tokens import bearer_keys
from evals.seeds import trial_seed
from evals.stats import estimate
from evals.types import Estimate, TrialResult

BUNDLED_MCQ = Path(__file__).parent / "data" / "mcq_synthetic.jsonl"
LETTERS = string.ascii_uppercase
INSTRUCTION = "Reply with the letter of the correct choice on the last line, as 'Answer: X'."


class McqLoadError(RecipeError, ValueError):
    """A multiple-choice file that cannot be loaded; the message names the file, the line and the field (a file to
    fix: the CLI prints it as one line)."""


class McqEngineError(RuntimeError):
    """The engine gave no usable reply to a question (HTTP error, malformed reply, transport failure)."""


class McqRow(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    question: str = Field(min_length=1)
    choices: list[str] = Field(min_length=2, max_length=len(LETTERS))
    answer: int = Field(ge=0, description="0-based index of the correct choice")
    subject: str | None = None

    @property
    def answer_letter(self) -> str:
        return LETTERS[self.answer]


def _answer_index(raw: Any, choices: list[str]) -> int:
    """A letter, a 0-based index or the text of a choice → the index; ``ValueError`` with the reason otherwise."""
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"must be a letter, an index or a choice's text, got {type(raw).__name__}")
    if isinstance(raw, int):
        if not 0 <= raw < len(choices):
            raise ValueError(f"index {raw} is out of range for {len(choices)} choices (0-based)")
        return raw
    text = raw.strip()
    if len(text) == 1 and text.upper() in LETTERS[: len(choices)]:
        return LETTERS.index(text.upper())
    matches = [i for i, choice in enumerate(choices) if choice.strip() == text]
    if len(matches) != 1:
        reason = "matches several choices" if matches else f"is not a letter A-{LETTERS[len(choices) - 1]} nor a choice"
        raise ValueError(f"{raw!r} {reason}")
    return matches[0]


def _row(obj: Any, number: int) -> McqRow:
    if not isinstance(obj, dict):
        raise ValueError(f"is not a JSON object (got {type(obj).__name__})")
    missing = [name for name in ("question", "choices", "answer") if name not in obj]
    if missing:
        raise ValueError(f"field '{missing[0]}' is required but missing")
    choices = obj["choices"]
    if not isinstance(choices, list) or not all(isinstance(c, str) and c.strip() for c in choices):
        raise ValueError("field 'choices' must be a list of non-empty strings")
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"field 'choices' needs 2 to {len(LETTERS)} choices, got {len(choices)}")
    try:
        answer = _answer_index(obj["answer"], choices)
    except ValueError as error:
        raise ValueError(f"field 'answer': {error}") from None
    extra = sorted(set(obj) - {"id", "question", "choices", "answer", "subject"})
    if extra:
        raise ValueError(f"unknown field '{extra[0]}'")
    question = obj["question"]
    if not isinstance(question, str) or not question.strip():
        raise ValueError("field 'question' must be a non-empty string")
    return McqRow(
        id=str(obj.get("id", f"line-{number}")),
        question=question,
        choices=choices,
        answer=answer,
        subject=obj.get("subject"),
    )


def load_mcq(path: Path) -> list[McqRow]:
    """Rows of a multiple-choice JSONL file (blank lines skipped); all or nothing, errors name file / line / field."""
    if not path.is_file():
        raise McqLoadError(f"{path}: no such file")
    rows: list[McqRow] = []
    for number, line in json_lines(path.read_text(encoding="utf-8")):
        try:
            rows.append(_row(parse_json(line), number))
        except JsonError as error:
            raise McqLoadError(f"{path}, line {number}: invalid JSON: {error}") from None
        except ValueError as error:
            raise McqLoadError(f"{path}, line {number}: {error}") from None
    if not rows:
        raise McqLoadError(f"{path}: holds no questions")
    seen: set[str] = set()
    for row in rows:
        if row.id in seen:
            raise McqLoadError(f"{path}: id {row.id!r} occurs more than once")
        seen.add(row.id)
    return rows


def format_prompt(row: McqRow) -> str:
    lines = [row.question.strip(), ""]
    lines += [f"{LETTERS[i]}. {choice}" for i, choice in enumerate(row.choices)]
    return "\n".join([*lines, "", INSTRUCTION])


# Patterns in priority order; each is searched for its *last* match (a reply may reason through other letters first).
_EXPLICIT = re.compile(r"\banswer\b\s*(?:is|:)?\s*[:=\-]?\s*(?:\*\*)?\(?([A-Za-z])\)?(?![A-Za-z])", re.IGNORECASE)
_PARENTHESISED = re.compile(r"\(([A-Z])\)")
_STANDALONE = re.compile(r"(?<![A-Za-z'])([A-Z])(?![A-Za-z'])")
_PATTERNS: tuple[re.Pattern[str], ...] = (_EXPLICIT, _PARENTHESISED, _STANDALONE)


def extract_choice(text: str, n_choices: int) -> str | None:
    """The letter (upper case) a reply chose among the first ``n_choices``, or ``None`` (scored as wrong)."""
    valid = LETTERS[:n_choices]
    text = strip_think(text)  # a reasoning model's thoughts name other letters first
    for pattern in _PATTERNS:
        letters = [m.group(1).upper() for m in pattern.finditer(text) if m.group(1).upper() in valid]
        if letters:
            return letters[-1]
    return None


# --- asking an engine ------------------------------------------------------------------------------------------------


class McqApi(StrEnum):
    CHAT = "chat"  # /v1/chat/completions: the server applies the chat template
    COMPLETIONS = "completions"  # /v1/completions with a text prompt ending in "Answer:"


@dataclass(frozen=True)
class _Route:
    path: str
    body: Callable[[str], dict[str, Any]]
    text: Callable[[dict[str, Any]], str]


_ROUTES: dict[McqApi, _Route] = {
    McqApi.CHAT: _Route(
        "/v1/chat/completions",
        lambda prompt: {"messages": [{"role": "user", "content": prompt}]},
        lambda choice: choice["message"]["content"] or "",
    ),
    McqApi.COMPLETIONS: _Route(
        "/v1/completions", lambda prompt: {"prompt": f"{prompt}\n\nAnswer:"}, lambda choice: choice["text"]
    ),
}


class McqAnswer(BaseModel):
    model_config = ConfigDict(frozen=True)

    row_id: str
    pass_index: int
    chosen: str | None
    correct: bool
    reply: str = Field(description="the reply's last 300 characters")


class McqResult(BaseModel):
    """Accuracy per pass (share of rows answered correctly) and its mean ± SE over passes."""

    model: str
    api: McqApi
    n_questions: int
    passes: int
    accuracy: Estimate
    accuracy_by_pass: list[float]
    no_answer_rate: float = Field(description="share of replies where no letter could be extracted")
    answers: list[McqAnswer]
    subjects: dict[str, str | None] = Field(default_factory=dict, description="row id → subject")

    def trial_results(self) -> list[TrialResult]:
        """Each answer as a ``TrialResult`` (reward 1 or 0, domain = subject), for ``evals.compare`` and reports."""
        return [
            TrialResult(
                task_id=a.row_id,
                pass_index=a.pass_index,
                passed=a.correct,
                reward=float(a.correct),
                domain=self.subjects.get(a.row_id),
            )
            for a in self.answers
        ]


@dataclass(frozen=True)
class McqConfig:
    """Which engine answers and how: ``passes`` sampled passes over every row, each (row, pass) with its own seed
    derived from ``seed`` (``evals.seeds.trial_seed``)."""

    engine_url: str
    model: str
    passes: int = 3
    temperature: float = 1.0
    api: McqApi = McqApi.CHAT
    max_tokens: int = 256
    concurrency: int = 8
    """Requests in flight at once."""
    seed: int = 0
    timeout_s: float = 120.0
    api_key_file: Path | None = None
    """A file holding the engine's bearer token (a run's gated engines)."""


async def _ask_all(rows: Sequence[McqRow], config: McqConfig) -> list[McqAnswer]:
    route = _ROUTES[config.api]
    gate = asyncio.Semaphore(config.concurrency)
    async with ApiClient(config.engine_url, config.timeout_s, keys=bearer_keys(config.api_key_file)) as api:

        async def ask(row: McqRow, pass_index: int) -> McqAnswer:
            body = route.body(format_prompt(row)) | {
                "model": config.model,
                "max_tokens": config.max_tokens,
                "temperature": config.temperature,
                "seed": trial_seed(config.seed, row.id, pass_index),
            }
            try:
                async with gate:
                    choice = first_choice(await api.post_json(route.path, body), route.path)
                text = route.text(choice)
            except ApiError as error:
                raise McqEngineError(f"question {row.id}: {error}") from error
            except (KeyError, TypeError) as error:
                raise McqEngineError(f"{route.path}: malformed reply for {row.id} ({error!r})") from None
            chosen = extract_choice(text, len(row.choices))
            return McqAnswer(
                row_id=row.id,
                pass_index=pass_index,
                chosen=chosen,
                correct=chosen == row.answer_letter,
                reply=text[-300:],
            )

        async with asyncio.TaskGroup() as group:
            jobs = [group.create_task(ask(row, p)) for p in range(config.passes) for row in rows]
    return [job.result() for job in jobs]


def run_mcq(rows: Sequence[McqRow], config: McqConfig) -> McqResult:
    """Ask every row once per pass, each (row, pass) with its own seed; accuracy = mean ± SE over passes.

    An engine error (HTTP status ≥ 400, malformed reply, transport failure, timeout) raises ``McqEngineError``: a
    regression number measured on a partial set would mislead.
    """
    if not rows:
        raise ValueError("no questions to ask")
    passes = config.passes
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    try:
        answers = asyncio.run(_ask_all(rows, config))
    except* McqEngineError as group:
        raise group.exceptions[0] from None  # the first failure says what is wrong; the rest repeat it
    by_pass = [[a.correct for a in answers if a.pass_index == p] for p in range(passes)]
    accuracy_P = [sum(correct) / len(correct) for correct in by_pass]
    return McqResult(
        model=config.model,
        api=config.api,
        n_questions=len(rows),
        passes=passes,
        accuracy=estimate(accuracy_P),
        accuracy_by_pass=accuracy_P,
        no_answer_rate=sum(a.chosen is None for a in answers) / len(answers),
        answers=answers,
        subjects={row.id: row.subject for row in rows},
    )
