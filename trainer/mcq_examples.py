"""Multiple-choice examples for the base: the bundled MCQ suite's questions with their right answers.

The recipe's base arrived knowing facts and answering multiple choice, and the transfer stage's regression suite
(GPQA/HLE style, ``evals.mcq``) measures whether RL wore that away. The tiny base knows nothing it is not taught, so
the bootstrap teaches it the suite itself: each question ``per_question`` times, answered ``Answer: X``. What the stage
then measures is retention — did training on the tool tasks erase what the base knew — the recipe's question, on
knowledge the base is known to hold.

Taught with the choices in other orders than the suite's (so that answering would mean finding the right choice's
text), the 4-layer base stayed at chance: 0.244 over 8 passes of the 40 questions (2026-12-02), so it learns the
suite's own prompts.

Each example is laid out exactly as the engine's ``/v1/chat/completions`` serves the suite (one user message, the chat
template's generation prompt); the reply's tokens plus EOS are the only ones with loss.

    examples = mcq_examples(tokenizer, load_mcq(BUNDLED_MCQ), per_question=8)
"""

from __future__ import annotations

from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from envs.harness.chat import encode, eos_token_id, render
from envs.harness.config import HarnessConfig
from evals.mcq import McqRow, format_prompt
from trainer.traces import DEFAULT_HARNESS, TokenizedTrace, turn_text

MCQ_THOUGHT = "The question names one right option."


def reply_text(row: McqRow) -> str:
    """The reply the base learns: the right choice's letter in the suite's answer format."""
    return f"Answer: {row.answer_letter}"


def prompt_text(tokenizer: PreTrainedTokenizerBase, row: McqRow) -> str:
    """The chat template's text for the suite's one user message, with the generation prompt (what the server
    renders for ``evals.mcq``'s chat request)."""
    return render(tokenizer, [{"role": "user", "content": format_prompt(row)}], add_generation_prompt=True)


def corpus_texts(rows: Sequence[McqRow]) -> list[str]:
    """The texts the tokenizer should know: every prompt and reply."""
    return [text for row in rows for text in (format_prompt(row), reply_text(row))]


def mcq_example(
    tokenizer: PreTrainedTokenizerBase, row: McqRow, config: HarnessConfig = DEFAULT_HARNESS
) -> TokenizedTrace:
    """prompt ids (mask 0) | encode(reply) + EOS (mask 1); the reply opens with its reasoning when the policy of
    ``config`` thinks."""
    prompt = encode(tokenizer, prompt_text(tokenizer, row))
    reply = [*encode(tokenizer, turn_text(reply_text(row), MCQ_THOUGHT, config)), eos_token_id(tokenizer)]
    return TokenizedTrace(prompt + reply, [0] * len(prompt) + [1] * len(reply))


def mcq_examples(
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[McqRow],
    per_question: int,
    config: HarnessConfig = DEFAULT_HARNESS,
) -> list[TokenizedTrace]:
    """Every row's example ``per_question`` times (one object each: rendered once, drawn as often)."""
    return [example for row in rows for example in [mcq_example(tokenizer, row, config)] * per_question]
