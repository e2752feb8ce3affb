"""Terminal examples for the base: each bundled terminal task solved by its own ``solve.sh`` in one ``bash`` call.

The recipe's base arrived able to work in a shell, and the transfer stage's terminal suite (the bundled Harbor tasks
through the terminal harness, ``envs.harness.terminal``) measures whether RL wore that away. The tiny base can do
nothing it is not taught, so — as with the multiple-choice suite (``trainer.mcq_examples``) — the bootstrap teaches it
the suite itself: instruction → one ``bash`` call whose command is the task's reference solution → a short answer.
What the stage then measures is retention on skills the base is known to hold, the recipe's question.

The solutions are 70-400 characters of shell (60-300 tokens), past the app tools' 96-token turns, so the base is
taught them with its own turn limit (``BootstrapSpec.terminal_max_tokens_per_turn``), stored in its ``harness.json``
for the terminal harness (``PolicyHarness.for_terminal``).

Each example is recorded, not rendered: the scripted turns are replayed through ``run_agent`` in the task's real
sandbox (``terminal_envs``), so its tokens are exactly a rollout's, its observation is what the command printed, and
the verifier must pass it (a taught command that fails its task raises ``ValueError``).

    examples = terminal_examples(tokenizer, bundled_terminal_tasks(), config, per_task=16)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from envs.harness.agent import AgentSetup, HarnessConfig, run_agent
from envs.harness.chat import encode, eos_token_id
from envs.harness.harbor import harbor_task_dir
from envs.harness.terminal import terminal_envs
from envs.types import TaskSpec
from trainer.traces import ANSWER_THOUGHT, DEFAULT_HARNESS, ReplayEngine, TokenizedTrace, tool_call_text, turn_text

ANSWER = "Done."
"""The final turn after the command ran (the verifier grades the files, not this text)."""


def solution_command(task: TaskSpec) -> str:
    """The task's ``solution/solve.sh`` as one bash command line: without its shebang and its ``cd /app`` (the
    terminal harness's bash already runs in ``/app``)."""
    script = (harbor_task_dir(task) / "solution" / "solve.sh").read_text(encoding="utf-8")
    lines = [line for line in script.splitlines() if not line.startswith("#!") and line.strip() != "cd /app"]
    return "\n".join(lines).strip()


def assistant_texts(task: TaskSpec, config: HarnessConfig = DEFAULT_HARNESS) -> list[str]:
    """The taught turns, as the policy of ``config`` writes them: the solution as a ``bash`` call, then ``ANSWER``."""
    call = tool_call_text("bash", {"command": solution_command(task)}, config.tool_format)
    return [turn_text(call, "Next I call bash.", config), turn_text(ANSWER, ANSWER_THOUGHT, config)]


def corpus_texts(tasks: Sequence[TaskSpec], config: HarnessConfig = DEFAULT_HARNESS) -> list[str]:
    """The texts the tokenizer should know: every instruction and taught turn."""
    return [text for task in tasks for text in (task.prompt, *assistant_texts(task, config))]


async def terminal_example(tokenizer: PreTrainedTokenizerBase, task: TaskSpec, config: HarnessConfig) -> TokenizedTrace:
    """``task``'s taught turns replayed in a fresh sandbox of the task: the rollout's tokens, loss on the turns."""
    eos = eos_token_id(tokenizer)
    turns = [[*encode(tokenizer, text), eos] for text in assistant_texts(task, config)]
    longest = max(len(turn) for turn in turns)
    if longest > config.max_tokens_per_turn:
        raise ValueError(
            f"terminal task {task.task_id}: its solution is a {longest}-token turn, more than the "
            f"{config.max_tokens_per_turn} the terminal harness samples (raise terminal_max_tokens_per_turn)"
        )
    agent = AgentSetup(ReplayEngine(turns), tokenizer, config, harness="terminal")
    async with terminal_envs(task)(0) as env:
        trajectory = await run_agent(task, env.tools, agent, grade_fn=env.grade, group_id=f"teach-{task.task_id}")
    if not trajectory.passed:
        raise ValueError(
            f"terminal task {task.task_id}: its taught solution does not pass the verifier "
            f"(reward {trajectory.reward}, stop {trajectory.stop_reason}: {trajectory.error})"
        )
    return TokenizedTrace(list(trajectory.tokens), list(trajectory.loss_mask))


def terminal_examples(
    tokenizer: PreTrainedTokenizerBase, tasks: Sequence[TaskSpec], config: HarnessConfig, per_task: int
) -> list[TokenizedTrace]:
    """Every task's example ``per_task`` times (recorded once, drawn as often); none when ``per_task`` is 0."""
    if per_task == 0:
        return []
    recorded = [asyncio.run(terminal_example(tokenizer, task, config)) for task in tasks]
    return [example for example in recorded for _ in range(per_task)]
