"""The TITO check: real rollouts through the harness are aligned; each way of breaking TITO is caught by its kind."""

import asyncio

import pytest

from envs.build import build_environment, load_tasks
from envs.harness.agent import AgentSetup, HarnessConfig, run_group
from envs.harness.chat import ToolListing, encode, eos_token_id
from envs.harness.engine_client import Completion
from envs.harness.tool_formats import ToolFormatName
from envs.rollout import local_envs
from trainer.tito import RecordingEngine, RetokenizingEngine, check_tito
from trainer.tokenizer import train_tokenizer
from trainer.traces import tool_call_text, turn_text

HARNESS = HarnessConfig(
    tool_listing=ToolListing.SIGNATURES, max_turns=4, max_tokens_per_turn=64, context_budget_tokens=4096
)


class ScriptedEngine:
    """Answers turn k of every rollout with the k-th scripted text's ids (two tool calls, then an answer)."""

    def __init__(self, tokenizer, texts: list[str], split_last: bool = False) -> None:
        eos = eos_token_id(tokenizer)
        self.turns = [[*encode(tokenizer, text), eos] for text in texts]
        if split_last:  # the answer's first token spelled as its bytes: decode → encode would merge them back
            first = tokenizer.convert_ids_to_tokens(self.turns[-1][0])
            self.turns[-1] = tokenizer.convert_tokens_to_ids(list(first)) + self.turns[-1][1:]
        self.history: list[tuple[list[int], list[int]]] = []

    async def complete(self, prompt_ids, sampling) -> Completion:
        # This rollout's turn: how many earlier answers (prompt + completion) the prompt extends.
        prompt = list(prompt_ids)
        turn = len(
            {tuple(before + ids) for before, ids in self.history if prompt[: len(before) + len(ids)] == before + ids}
        )
        ids = self.turns[min(turn, len(self.turns) - 1)]
        self.history.append((prompt, ids))
        return Completion(ids, [-0.1 * (i + 1) for i in range(len(ids))], "stop")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    data = tmp_path_factory.mktemp("tito") / "data"
    build_environment(data)
    task = next(t for t in load_tasks(data) if t.task_id == "ib-1-toy-0001")
    tokenizer = train_tokenizer([task.prompt, "the answer is 25.9 and more answers", "sheets_read_cell"] * 20, 400)
    return data, task, tokenizer


def rollouts(setup, split_last: bool = False):
    data, task, tokenizer = setup
    args = {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"}
    texts = [tool_call_text("sheets.read_cell", args), tool_call_text("sheets.read_cell", args), "answers 25.9"]
    engine = RecordingEngine(ScriptedEngine(tokenizer, texts, split_last))
    agent = AgentSetup(engine, tokenizer, HARNESS)
    group = asyncio.run(run_group(task, local_envs(task, data / "worlds", ("sheets",)), agent, group_id="g", n=3))
    return group, engine, tokenizer


def test_harness_rollouts_are_aligned(setup) -> None:
    group, engine, tokenizer = rollouts(setup)
    report = check_tito(group, engine.exchanges, tokenizer)
    assert report.total_misalignments == 0, report.examples
    assert report.trajectories == 3 and report.sampled_turns == 9 and report.multi_call_rollouts == 3
    assert report.exchanges == 9 and report.drift_turns == 0


def test_each_break_is_caught_by_its_kind(setup) -> None:
    group, engine, tokenizer = rollouts(setup)
    sampled, masked, reordered = (t.model_copy(deep=True) for t in group)
    span = sampled.turns[1]
    sampled.tokens[span.start] = (sampled.tokens[span.start] + 1) % len(tokenizer)  # not what the engine returned
    masked.loss_mask[masked.turns[0].end] = 1  # an observation token under the loss mask
    reordered.logprobs[reordered.turns[2].start] += 0.5  # the trainer would see another rollout logprob
    report = check_tito([sampled, masked, reordered], engine.exchanges, tokenizer)
    assert report.misalignments["sampled"] >= 2  # the changed span, and the next turn's prompt no request had
    assert report.misalignments["loss_mask"] == 1
    assert report.total_misalignments >= 4 and report.examples


def test_drift_of_a_retokenised_turn_is_measured(setup) -> None:
    group, engine, tokenizer = rollouts(setup, split_last=True)
    report = check_tito(group, engine.exchanges, tokenizer)
    assert report.total_misalignments == 0  # token in, token out: the split ids are what the trainer sees
    assert report.drift_turns == 3 and report.drift_rate == pytest.approx(3 / 9)


def test_a_harness_that_retokenises_text_is_caught(setup) -> None:
    """The gate matrix's defect: where decode → encode is not the identity (the split answer), the trajectory keeps
    other ids than the engine returned."""
    data, task, tokenizer = setup
    args = {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"}
    texts = [tool_call_text("sheets.read_cell", args), "answers 25.9"]
    recorder = RecordingEngine(ScriptedEngine(tokenizer, texts, split_last=True))
    agent = AgentSetup(RetokenizingEngine(recorder, tokenizer), tokenizer, HARNESS)
    group = asyncio.run(run_group(task, local_envs(task, data / "worlds", ("sheets",)), agent, group_id="g", n=2))
    report = check_tito(group, recorder.exchanges, tokenizer)
    assert report.misalignments["sampled"] == 2  # each rollout's answer turn
    assert all("the span is not what the engine returned" in example for example in report.examples)


@pytest.mark.parametrize("keeps_reasoning", [True, False])
def test_the_re_render_figure_counts_what_a_chat_template_would_drop(setup, keeps_reasoning: bool) -> None:
    """A thinking policy in the XML dialect: when the family's template keeps earlier reasoning (Qwen3.6) a re-render
    of this harness's turns changes nothing; when it strips it (Qwen3), the reasoning's tokens are the figure."""
    data, task, _ = setup
    tokenizer = train_tokenizer([task.prompt, "sheets_read_cell <think> answers"] * 20, 400, ToolFormatName.QWEN3_XML)
    harness = HARNESS.model_copy(
        update={"tool_format": ToolFormatName.QWEN3_XML, "thinking": True, "reasoning_in_history": keeps_reasoning}
    )
    args = {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"}
    call = turn_text(tool_call_text("sheets.read_cell", args, ToolFormatName.QWEN3_XML), "Next I call it.", harness)
    texts = [call, turn_text("answers 25.9", "Done.", harness)]
    engine = RecordingEngine(ScriptedEngine(tokenizer, texts))
    agent = AgentSetup(engine, tokenizer, harness)
    group = asyncio.run(run_group(task, local_envs(task, data / "worlds", ("sheets",)), agent, group_id="g", n=2))
    report = check_tito(group, engine.exchanges, tokenizer, harness)
    assert report.total_misalignments == 0 and all(len(t.tool_calls) == 1 for t in group)
    thoughts = sum(
        len(encode(tokenizer, f"<think>\n{thought}\n</think>\n\n")) for thought in ("Next I call it.", "Done.")
    )
    expected = 0 if keeps_reasoning else thoughts
    assert report.rerender_changed == [expected, expected], (report.rerender_changed, thoughts)
