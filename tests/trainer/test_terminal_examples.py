import asyncio
import json
import shutil
from pathlib import Path

import pytest

from envs.harness.agent import HarnessConfig
from envs.harness.parsing import parse_turn
from envs.harness.terminal import BUNDLED_TERMINAL_TASKS, bundled_terminal_tasks
from envs.loaders import load_harbor_dir
from trainer.terminal_examples import ANSWER, corpus_texts, solution_command, terminal_example, terminal_examples
from trainer.tokenizer import train_tokenizer

CONFIG = HarnessConfig(max_tokens_per_turn=512, context_budget_tokens=4096, max_turns=4, temperature=1.0)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(corpus_texts(bundled_terminal_tasks()), vocab_size=600)


def _turn_texts(tokenizer, example) -> list[str]:
    """The decoded runs of loss-masked tokens (the taught turns, EOS dropped)."""
    runs, current = [], []
    for token, taught in zip(example.tokens, example.loss_mask, strict=True):
        if taught:
            current.append(token)
        elif current:
            runs, current = [*runs, current], []
    runs += [current] if current else []
    return [tokenizer.decode(run, skip_special_tokens=True) for run in runs]


def test_the_command_is_the_reference_script_run_where_the_agent_works():
    task = next(t for t in bundled_terminal_tasks() if t.task_id.endswith("top-words"))
    command = solution_command(task)
    assert command.startswith("set -euo pipefail\ntr -cs") and "cd /app" not in command and "#!" not in command


def test_every_bundled_task_is_recorded_solved_in_its_sandbox(tokenizer):
    """Each example is a real rollout: the taught command ran in the task's sandbox and its verifier passed."""
    examples = terminal_examples(tokenizer, bundled_terminal_tasks(), CONFIG, per_task=2)
    tasks = bundled_terminal_tasks()
    assert len(examples) == 2 * len(tasks) and len({id(e) for e in examples}) == len(tasks)
    for task, example in zip(tasks, examples[::2], strict=True):
        call, answer = _turn_texts(tokenizer, example)
        (parsed,) = parse_turn(call).calls
        assert parsed.name == "bash" and parsed.arguments == {"command": solution_command(task)}
        assert answer == ANSWER
        observation = tokenizer.decode(example.tokens, skip_special_tokens=True)
        assert "exit_code: 0" in observation  # what the command printed, between the two turns
    assert terminal_examples(tokenizer, tasks, CONFIG, per_task=0) == []


def test_a_script_longer_than_the_terminal_turn_is_refused_by_name(tokenizer):
    task = bundled_terminal_tasks()[0]
    short = CONFIG.model_copy(update={"max_tokens_per_turn": 16})
    with pytest.raises(ValueError, match=rf"{task.task_id}: its solution is a \d+-token turn, more than the 16"):
        asyncio.run(terminal_example(tokenizer, task, short))


def test_a_solution_that_fails_its_verifier_is_never_taught(tokenizer, tmp_path: Path):
    folder = tmp_path / "tasks" / "top-words"
    shutil.copytree(BUNDLED_TERMINAL_TASKS / "top-words", folder)
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\necho the wrong words > top_words.txt\n")
    (task,) = load_harbor_dir(folder.parent)
    with pytest.raises(ValueError, match="does not pass the verifier"):
        asyncio.run(terminal_example(tokenizer, task, CONFIG))


def test_the_corpus_holds_each_instruction_and_taught_turn():
    task = bundled_terminal_tasks()[0]
    texts = corpus_texts([task])
    assert texts[0] == task.prompt and json.loads(texts[1].split("\n")[1])["name"] == "bash" and texts[2] == ANSWER
