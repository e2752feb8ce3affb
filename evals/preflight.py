"""Configuration errors surface before any trial, each an ``EvalConfigError``: the engine serves ``spec.engine.model``
(``GET /v1/models``), the context budget fits the model card's ``max_model_len``, the tokenizer loads, the first
task's first prompt fits the context budget, and tasks with ``llm_judge`` criteria have a judge (with its keys).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from envs.harness.agent import EnvsForTask
from envs.harness.chat import initial_messages, prompt_ids
from envs.tokens import bearer_keys
from envs.types import TaskSpec
from evals.errors import EvalConfigError
from evals.resolved_harness import ResolvedHarness
from evals.spec import EngineSpec, EvalSpec

MODELS_TIMEOUT_S = 30.0


def served_models(
    base_url: str, timeout_s: float = MODELS_TIMEOUT_S, api_key_file: Path | None = None
) -> dict[str, dict[str, Any]]:
    """The engine's model cards by id (``GET /v1/models``, with the token in ``api_key_file`` when given); an
    unreachable engine or a bad reply is an ``EvalConfigError``."""
    url = f"{base_url.rstrip('/')}/v1/models"
    keys = bearer_keys(api_key_file)
    headers = {"Authorization": f"Bearer {keys[0].get_secret_value()}"} if keys else {}
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as error:
        raise EvalConfigError(
            f"cannot reach the engine at {base_url} ({type(error).__name__}: {error}); start one "
            "(`recipe engine serve --model DIR`) or fix --engine-url"
        ) from None
    if response.status_code != 200:
        raise EvalConfigError(f"GET {url} answered HTTP {response.status_code}: {response.text[:300]}")
    try:
        cards = response.json()["data"]
        return {str(card["id"]): card for card in cards}
    except (ValueError, KeyError, TypeError):
        raise EvalConfigError(f"GET {url} did not list models as OpenAI's API does: {response.text[:300]}") from None


def check_judge(spec: EvalSpec, tasks: list[TaskSpec]) -> None:
    """Tasks whose rubric needs a judge get one, and the environment holds its keys: else no trial could be graded."""
    judged = [task.task_id for task in tasks if task.needs_judge]
    if judged and spec.judge is None:
        raise EvalConfigError(
            f"{len(judged)} task(s) have llm_judge criteria (e.g. {judged[0]}) and no judge is configured; pass "
            "--judge-url URL --judge-model NAME (an OpenAI-compatible server; keys from --judge-key-env)"
        )
    if spec.judge is not None:
        try:
            spec.judge.config().resolve_keys()
        except ValueError as error:
            raise EvalConfigError(f"the judge's keys: {error}") from None


def check_engine(spec: EvalSpec, harness: ResolvedHarness) -> None:
    """The engine serves ``spec.engine.model``, and the context budget fits its card's ``max_model_len``."""
    cards = served_models(spec.engine.base_url, min(spec.engine.timeout_s, MODELS_TIMEOUT_S), spec.engine.api_key_file)
    model = spec.engine.model
    if model not in cards:
        served = sorted(cards)
        fix = f"pass --model {served[0]}" if len(served) == 1 else "pass --model with one of them"
        raise EvalConfigError(f"the engine at {spec.engine.base_url} serves {served}, not {model!r}; {fix}")
    limit = cards[model].get("max_model_len")
    budget = harness.settings.harness.context_budget_tokens
    if isinstance(limit, int) and budget > limit:
        raise EvalConfigError(
            f"the context budget of {budget} tokens exceeds the max_model_len of {limit} with which "
            f"{spec.engine.base_url} serves {model!r}; pass --context-budget {limit} or serve a longer context. "
            f"The budget comes from {harness.origin('context_budget_tokens')}"
        )


async def check_first_prompt(task: TaskSpec, envs_for: EnvsForTask, tokenizer: Any, harness: ResolvedHarness) -> None:
    """The first task's first prompt, rendered as its rollouts will render it, fits the context budget."""
    config = harness.settings.harness
    try:
        async with envs_for(task)(0) as env:
            tools = await env.tools.list_tools()
    except Exception:  # a task whose environment fails is recorded by its trials (task or infra), not a config error
        return
    size = len(prompt_ids(tokenizer, initial_messages(config.system_prompt, task.prompt), tools, config.tool_listing))
    if size >= config.context_budget_tokens:
        raise EvalConfigError(
            f"the first prompt of task {task.task_id} is {size} tokens ({config.tool_listing.value} tool listing, "
            f"{len(tools)} tools): it does not fit the context budget of {config.context_budget_tokens} tokens, so "
            f"every trial would fail before its first turn. The harness settings come from {harness.origin()}"
        )


def load_tokenizer(engine: EngineSpec) -> Any:
    from transformers import AutoTokenizer

    name = engine.tokenizer or engine.model
    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise EvalConfigError(
            f"cannot load the tokenizer {name!r} ({type(error).__name__}); pass --tokenizer DIR, the policy folder "
            "the engine serves"
        ) from None
