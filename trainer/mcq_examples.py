"""Multiple-choice examples for the base: the bundled MCQ suite's questions, each with its choices in other orders.

The recipe's base arrived knowing facts and answering multiple choice, and the transfer stage's regression suite
(GPQA/HLE style, ``evals.mcq``) measures whether RL wore that away. The tiny base knows nothing it is not taught, so
the bootstrap teaches it the suite's facts the way pretraining would have: each question ``per_question`` times with its
choices in a seeded order **other than the suite's own** (the letter follows the right choice), answered
``Answer: X``. The suite then asks every question in an order the base never saw: answering right means recognising
the right choice's text, not replaying a letter. What the stage measures is retention — did training on the tool
tasks erase what the base knew — which is the recipe's question too.

Each example is laid out exactly as the engine's ``/v1/chat/completions`` serves the suite (``evals.mcq``: one user
message, the chat template's generation prompt), the reply's tokens plus EOS the only ones with loss.

    rows = reordered_rows(load_mcq(BUNDLED_MCQ), per_question=4, seed=0)
    examples = [mcq_example(tokenizer, row) for row in rows]
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from envs.harness.chat import encode, eos_token_id, render
from evals.mcq import McqRow, format_prompt
from trainer.traces import TokenizedTrace


def reply_text(row: McqRow) -> str:
    """The reply the base learns: the right choice's letter in the suite's answer format."""
    return f"Answer: {row.answer_letter}"


def reordered(row: McqRow, rng: random.Random) -> McqRow:
    """``row`` with its choices in a random order other than its own (the answer index follows its choice)."""
    identity = list(range(len(row.choices)))
    order = identity
    while order == identity:
        order = rng.sample(identity, len(identity))
    return row.model_copy(update={"choices": [row.choices[i] for i in order], "answer": order.index(row.answer)})


def reordered_rows(rows: Sequence[McqRow], per_question: int, seed: int) -> list[McqRow]:
    """Every row ``per_question`` times, each copy in its own seeded order (``reordered``)."""
    return [
        reordered(row, random.Random(f"{seed}:mcq:{row.id}:{copy}")) for row in rows for copy in range(per_question)
    ]


def prompt_text(tokenizer: PreTrainedTokenizerBase, row: McqRow) -> str:
    """The chat template's text for the suite's one user message, with the generation prompt (what the server
    renders for ``evals.mcq``'s chat request)."""
    return render(tokenizer, [{"role": "user", "content": format_prompt(row)}], add_generation_prompt=True)


def corpus_texts(rows: Sequence[McqRow]) -> list[str]:
    """The texts the tokenizer should know: every prompt and reply."""
    return [text for row in rows for text in (format_prompt(row), reply_text(row))]


def mcq_example(tokenizer: PreTrainedTokenizerBase, row: McqRow) -> TokenizedTrace:
    """prompt ids (mask 0) | encode(reply) + EOS (mask 1)."""
    prompt = encode(tokenizer, prompt_text(tokenizer, row))
    reply = [*encode(tokenizer, reply_text(row)), eos_token_id(tokenizer)]
    return TokenizedTrace(prompt + reply, [0] * len(prompt) + [1] * len(reply))
