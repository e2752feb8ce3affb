"""Base-model bootstrap: trace rendering equals the harness's layout, noise rates, cache, a tiny run end to end."""

import asyncio
import json
import random
import re
import time
from pathlib import Path

import pytest

from envs.apps import World
from envs.build import build_environment, content_digest, load_manifest, load_tasks
from envs.harness.agent import AgentSetup, run_group
from envs.harness.code_tools import CODE_TOOLS, CodeToolSession, RegistryToolSession
from envs.harness.policy import HARNESS_FILE, PolicyHarness, read_policy_harness, write_policy_harness
from envs.harness.tool_formats import ToolFormatName
from envs.harness.tools import LocalToolSession
from envs.rollout import local_envs
from envs.sandbox.world_copy import fork_world
from envs.types import StopReason, Tier, Trajectory
from evals.spec import HarnessKind
from trainer.bootstrap import (
    bootstrap,
    content_hash,
    draw_imitation_set,
    draw_traces,
    harness_config,
    offered_tools,
    policy_harness,
    select_tasks,
    tokenize_imitation_set,
)
from trainer.engine import Engine, EngineConfig
from trainer.engine.completions import EngineCompletions
from trainer.local.retention import read_retention_file
from trainer.model import load_policy
from trainer.retention import NoRetentionSet, retention_examples, write_retention_file
from trainer.specs import BootstrapSpec, NoiseKind, NoiseRates, RetentionSource, TinyModelSpec
from trainer.tokenizer import train_tokenizer
from trainer.traces import (
    ParityError,
    TokenizedTrace,
    Trace,
    check_parity,
    code_only_trace,
    copies_last_observation,
    draw_noise,
    noise_candidates,
    noisy_trace,
    oracle_trace,
    render_trace,
    swapped_trace,
)

REPO = Path(__file__).resolve().parents[2]
APPS = ("filesystem", "sheets")
TINY = BootstrapSpec(
    model=TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=1024),
    vocab_size=400,
    steps=2,
    batch_size=2,
    traces_per_task=2,
    log_every=1,
    parity_checks=2,
    eval_samples=0,
    max_tokens_per_turn=160,  # every taught turn must fit (check_turn_lengths); a 400-token vocabulary splits finely
    max_turns=2,
)


@pytest.fixture(scope="module")
def full_data(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("env") / "data"
    build_environment(data)
    return data


@pytest.fixture(scope="module")
def small_data(full_data: Path, tmp_path_factory) -> Path:
    """The worlds, with task files cut to three toy train tasks and one held-out one of world ib-1."""
    data = tmp_path_factory.mktemp("small") / "data"
    (data / "tasks").mkdir(parents=True)
    (data / "worlds").symlink_to(full_data / "worlds")
    for split, count in (("train", 3), ("heldout", 1)):
        lines = [
            line
            for line in (full_data / "tasks" / f"{split}.jsonl").read_text().splitlines()
            if json.loads(line)["task_id"].startswith("ib-1-toy-")
        ]
        (data / "tasks" / f"{split}.jsonl").write_text("\n".join(lines[:count]) + "\n")
    manifest = load_manifest(full_data).model_copy(update={"content_digest": content_digest(data)})
    (data / "manifest.json").write_text(manifest.model_dump_json())
    return data


@pytest.fixture(scope="module")
def cell_task(full_data):
    return next(t for t in load_tasks(full_data) if t.task_id == "ib-1-toy-0001")  # B12 of Model, operating_model


@pytest.fixture
def world(full_data, tmp_path) -> World:
    return World(fork_world(full_data / "worlds" / "ib-1", tmp_path / "ib-1"))


def test_noise_candidates_of_a_cell_read(cell_task, world):
    offered = offered_tools(APPS)
    assert noise_candidates(cell_task, world, NoiseKind.WRONG_TOOL, offered) == [
        ("sheets.read_formula", {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"})
    ]
    assert [args["path"] for _, args in noise_candidates(cell_task, world, NoiseKind.WRONG_FILE, offered)] == [
        "models/comps.xlsx"
    ]
    wrong_args = noise_candidates(cell_task, world, NoiseKind.WRONG_ARGUMENT, offered)
    cells = [args["cell"] for _, args in wrong_args if args["sheet"] == "Model"]
    sheets = [args["sheet"] for _, args in wrong_args if args["cell"] == "B12"]
    assert cells == ["B11", "B13", "A12", "C12"] and sheets == ["Assumptions", "Valuation"]


def test_noisy_trace_answers_with_the_real_observation(cell_task, world):
    call = ("sheets.read_formula", {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"})
    trace = noisy_trace(cell_task, world, NoiseKind.WRONG_TOOL, call)
    assert trace.calls[0].observation == "=B9-B11" and trace.answer == "=B9-B11"
    clean = oracle_trace(cell_task, world)
    assert clean.answer == "25.9" and clean.calls[0].tool == "sheets.read_cell" and clean.noise is None


def test_a_failed_wrong_call_is_recovered_from_and_a_silent_one_is_not(cell_task, world):
    clean = oracle_trace(cell_task, world)
    missing = ("sheets.read_cell", {"path": "models/operating_model.xlsx", "sheet": "Nowhere", "cell": "B12"})
    recovered = noisy_trace(cell_task, world, NoiseKind.WRONG_ARGUMENT, missing, recovery=clean)
    assert recovered.calls[0].failed and "Nowhere" in recovered.calls[0].observation
    assert recovered.calls[1:] == clean.calls and recovered.answer == "25.9"  # read the error, made the right call
    silent = ("sheets.read_formula", {"path": "models/operating_model.xlsx", "sheet": "Model", "cell": "B12"})
    answered = noisy_trace(cell_task, world, NoiseKind.WRONG_TOOL, silent, recovery=clean)
    assert len(answered.calls) == 1 and answered.answer == "=B9-B11"  # nothing told it the value was wrong


def test_draw_noise_respects_the_rates():
    rates = {NoiseKind.WRONG_TOOL: 0.1, NoiseKind.WRONG_FILE: 0.08, NoiseKind.WRONG_ARGUMENT: 0.07}
    rng = random.Random(0)
    draws = [draw_noise(rng, rates, set(NoiseKind)) for _ in range(20_000)]
    for kind, rate in rates.items():
        assert draws.count(kind) / len(draws) == pytest.approx(rate, abs=0.01)
    assert draws.count(None) / len(draws) == pytest.approx(0.75, abs=0.01)
    # Without wrong_file candidates its share is redrawn among the others: still 25 % noisy, none wrong_file.
    narrowed = [draw_noise(rng, rates, {NoiseKind.WRONG_TOOL, NoiseKind.WRONG_ARGUMENT}) for _ in range(20_000)]
    assert NoiseKind.WRONG_FILE not in narrowed
    assert narrowed.count(None) / len(narrowed) == pytest.approx(0.75, abs=0.01)
    assert narrowed.count(NoiseKind.WRONG_TOOL) / len(narrowed) == pytest.approx(0.25 * 10 / 17, abs=0.01)


def test_draw_traces_is_seeded_and_noisy_at_the_rate(cell_task, world):
    spec = BootstrapSpec(traces_per_task=400, noise=NoiseRates(wrong_tool=0.2, wrong_file=0.1, wrong_argument=0.1))
    clean = oracle_trace(cell_task, world)
    traces = draw_traces(cell_task, world, spec, clean)
    assert [t.noise for t in traces] == [t.noise for t in draw_traces(cell_task, world, spec, clean)]
    shares = {kind: sum(t.noise == kind for t in traces) / len(traces) for kind in NoiseKind}
    assert shares == pytest.approx({"wrong_tool": 0.2, "wrong_file": 0.1, "wrong_argument": 0.1}, abs=0.05)


def test_value_swaps_teach_copying_the_observation(cell_task, world):
    """About value_swap of the clean traces show another task's value of the same kind, and answer with it."""
    spec = BootstrapSpec(
        traces_per_task=400, value_swap=0.5, noise=NoiseRates(wrong_tool=0.0, wrong_file=0.0, wrong_argument=0.0)
    )
    clean = oracle_trace(cell_task, world)
    assert copies_last_observation(clean)
    traces = draw_traces(cell_task, world, spec, clean, values=["7", "12.5", "Acme Corp", clean.answer])
    swapped = [t for t in traces if t.swapped]
    assert len(swapped) / len(traces) == pytest.approx(0.5, abs=0.07)
    # numbers for a numeric answer, shaped like a donor ("7", "12.5") with the digits redrawn: values no world holds
    assert all(re.fullmatch(r"\d|\d\d\.\d", t.answer) for t in swapped) and len({t.answer for t in swapped}) > 20
    assert all(t.calls[-1].observation == t.answer and t.calls[:-1] == clean.calls[:-1] for t in swapped)
    assert all(t == clean for t in traces if not t.swapped)
    with pytest.raises(ValueError, match="not its last observation"):
        swapped_trace(Trace("t", clean.calls, "something else"), "7")


def test_noise_rates_over_one_are_refused():
    with pytest.raises(ValueError, match=r"sum to 1\.2"):
        NoiseRates(wrong_tool=0.6, wrong_file=0.6, wrong_argument=0.0)


def test_rendered_trace_equals_the_harness_rollout(cell_task, world, full_data, tmp_path):
    config = harness_config(TINY).model_copy(update={"context_budget_tokens": 100_000})  # a 400-token vocabulary
    clean = oracle_trace(cell_task, world)
    wrong = noisy_trace(
        cell_task,
        world,
        NoiseKind.WRONG_FILE,
        noise_candidates(cell_task, world, NoiseKind.WRONG_FILE, offered_tools(APPS))[0],
    )
    tools = asyncio.run(_tools())
    tok = train_tokenizer([cell_task.prompt, *clean.assistant_texts(), *wrong.assistant_texts()] * 5, vocab_size=400)
    for trace in (clean, wrong):
        rendered = render_trace(tok, cell_task, trace, tools, config)
        assert sum(rendered.loss_mask) == sum(len(tok.encode(t)) + 1 for t in trace.assistant_texts())
        asyncio.run(check_parity(tok, cell_task, trace, rendered, LocalToolSession(world, apps=APPS), config))
    with pytest.raises(ValueError, match="more than max_tokens_per_turn=4"):  # a turn the policy could never sample
        render_trace(tok, cell_task, clean, tools, config.model_copy(update={"max_tokens_per_turn": 4}))
    broken = TokenizedTrace(rendered.tokens[:-2] + rendered.tokens[-1:], rendered.loss_mask[:-1])
    with pytest.raises(ParityError, match="differ"):
        asyncio.run(check_parity(tok, cell_task, wrong, broken, LocalToolSession(world, apps=APPS), config))


@pytest.mark.parametrize("tool_format", list(ToolFormatName))
def test_a_thinking_policys_trace_in_each_dialect_equals_the_harness_rollout(cell_task, world, tool_format):
    """The named models' dialect (Qwen3-Coder XML) with reasoning before every turn: the trace the bootstrap teaches
    is token for token what ``run_agent`` records when the policy samples it, and the harness reads its calls."""
    spec = TINY.model_copy(update={"tool_format": tool_format, "thinking": True})
    config = harness_config(spec).model_copy(update={"context_budget_tokens": 100_000})
    clean = oracle_trace(cell_task, world)
    texts = clean.assistant_texts(config)
    assert texts[0].startswith("<think>\nNext I call sheets_read_cell.\n</think>\n\n<tool_call>\n")
    assert ("<function=sheets_read_cell>" in texts[0]) is (tool_format is ToolFormatName.QWEN3_XML)
    tools = asyncio.run(_tools())
    tok = train_tokenizer([cell_task.prompt, *texts] * 5, vocab_size=400, tool_format=tool_format)
    rendered = render_trace(tok, cell_task, clean, tools, config)
    asyncio.run(check_parity(tok, cell_task, clean, rendered, LocalToolSession(world, apps=APPS), config))


def test_a_code_only_trace_equals_the_code_only_harness_rollout(cell_task, world):
    """The same calls as bash lines of the app CLI, a failing one (a moved file: exit 1, the error on stderr)
    included, lay out token for token as the code-only harness records them with its real bash."""
    config = harness_config(TINY).model_copy(update={"context_budget_tokens": 100_000, "max_turns": 3})
    clean = oracle_trace(cell_task, world)
    first = clean.calls[0]
    failing = (first.tool, {**first.args, "path": f"elsewhere/{Path(first.args['path']).name}"})
    recovered = noisy_trace(cell_task, world, NoiseKind.WRONG_ARGUMENT, failing, recovery=clean)
    assert recovered.calls[0].failed and len(recovered.calls) == len(clean.calls) + 1
    traces = [code_only_trace(clean), code_only_trace(recovered)]
    assert all(trace.harness is HarnessKind.CODE_ONLY for trace in traces)
    assert traces[0].calls[0].observation == f"exit_code: 0\nstdout:\n{clean.calls[0].observation}\n\nstderr:\n"
    assert traces[0].assistant_texts()[0].startswith('<tool_call>\n{"name": "bash", "arguments": {"command": "python')
    tools = asyncio.run(RegistryToolSession(CODE_TOOLS).list_tools())
    texts = [text for trace in traces for text in trace.assistant_texts()]
    tok = train_tokenizer([cell_task.prompt, *texts] * 5, vocab_size=400)
    for trace in traces:
        rendered = render_trace(tok, cell_task, trace, tools, config)
        asyncio.run(check_parity(tok, cell_task, trace, rendered, CodeToolSession(world.root), config))
    with pytest.raises(ValueError, match="only an app-tool trace"):
        code_only_trace(traces[0])


def test_code_only_share_records_that_share_of_the_traces_in_the_code_only_harness(cell_task, world):
    spec = BootstrapSpec(traces_per_task=400, code_only_share=0.25)
    clean = oracle_trace(cell_task, world)
    traces = draw_traces(cell_task, world, spec, clean)
    code_only = [t for t in traces if t.harness is HarnessKind.CODE_ONLY]
    assert len(code_only) / len(traces) == pytest.approx(0.25, abs=0.06)
    # a clean trace drawn many times stays one object per harness: rendered once each
    assert len({id(t) for t in code_only if t.noise is None and not t.swapped}) == 1
    assert [t.harness for t in draw_traces(cell_task, world, spec, clean)] == [t.harness for t in traces]
    assert not any(t.harness is HarnessKind.CODE_ONLY for t in draw_traces(cell_task, world, BootstrapSpec(), clean))


async def _tools():
    return await LocalToolSession(World(Path(".")), apps=APPS).list_tools()


def test_select_tasks_keeps_tiers_whose_oracles_fit_the_apps(full_data):
    chosen = select_tasks(load_tasks(full_data), TINY)
    assert chosen and all(t.tier is Tier.TOY for t in chosen)
    with pytest.raises(ValueError, match="no task of tiers"):
        select_tasks(load_tasks(full_data), TINY.model_copy(update={"apps": ("mail",)}))


def test_cache_key_follows_environment_content_not_its_build_time(full_data, tmp_path):
    rebuilt = tmp_path / "data"
    build_environment(rebuilt)  # a second build: same bytes, another generation time in the manifest
    assert content_hash(TINY, rebuilt) == content_hash(TINY, full_data)
    train = rebuilt / "tasks" / "train.jsonl"
    train.write_text(train.read_text().replace("ib-1-toy-0001", "ib-1-toy-9999", 1))
    manifest = load_manifest(rebuilt).model_copy(update={"content_digest": content_digest(rebuilt)})
    (rebuilt / "manifest.json").write_text(manifest.model_dump_json())
    assert content_hash(TINY, rebuilt) != content_hash(TINY, full_data)
    (rebuilt / "manifest.json").write_text('{"seed": 0}')  # an older manifest format: rebuild, don't guess
    with pytest.raises(FileNotFoundError, match="missing or outdated"):
        content_hash(TINY, rebuilt)


def test_a_base_taught_terminal_tasks_keys_and_stores_their_turn_limit(full_data):
    taught = TINY.model_copy(update={"terminal_examples_per_task": 2})
    assert content_hash(taught, full_data) != content_hash(TINY, full_data)
    assert policy_harness(taught).terminal_max_tokens_per_turn == taught.terminal_max_tokens_per_turn
    # untaught, the terminal fields are out of the key (bases cached before they existed stay valid) and the policy
    assert content_hash(TINY.model_copy(update={"terminal_max_tokens_per_turn": 99}), full_data) == content_hash(
        TINY, full_data
    )
    assert policy_harness(TINY).terminal_max_tokens_per_turn is None


def test_tiny_bootstrap_end_to_end_then_cache_hit(small_data, tmp_path):
    lines: list[str] = []
    result = bootstrap(TINY, small_data, tmp_path / "models", progress=lines.append)
    assert not result.cached and result.report.steps_done == 2 and len(result.report.losses) == 2
    assert sum(result.report.noise_counts.values()) == result.report.traces == 6
    assert (result.path / "bootstrap.json").is_file() and any("step 2/2" in line for line in lines)
    started = time.perf_counter()
    again = bootstrap(TINY, small_data, tmp_path / "models")
    assert again.cached and again.path == result.path and time.perf_counter() - started < 1.0
    assert again.report == result.report
    other = bootstrap(TINY.model_copy(update={"seed": 1}), small_data, tmp_path / "models")
    assert other.path != result.path and not other.cached
    # a base cut short by its wall limit is reused with a warning: a fresh build under the same key trains every step
    capped_spec = TINY.model_copy(update={"seed": 2, "steps": 50, "max_wall_seconds": 1e-6})
    capped = bootstrap(capped_spec, small_data, tmp_path / "models")
    assert capped.report.stopped_early and capped.report.steps_done < 50
    lines.clear()
    assert bootstrap(capped_spec, small_data, tmp_path / "models", progress=lines.append).cached
    assert any("WARNING: its training stopped at the 1e-06 s wall limit" in line for line in lines), lines
    assert_harness_json_drives_the_loops(result.path, small_data, tmp_path / "models")

    model, tokenizer = load_policy(result.path)
    [task] = [t for t in load_tasks(small_data) if t.split == "heldout"]
    engine = Engine(model, tokenizer, EngineConfig(max_num_seqs=2, torch_threads=1))
    try:
        trajectories = asyncio.run(
            run_group(task, local_envs(task, small_data / "worlds", APPS),
                      AgentSetup(EngineCompletions(engine), tokenizer, harness_config(TINY)), group_id="g", n=2)
        )  # fmt: skip
    finally:
        engine.close()
    assert [t.sample_index for t in trajectories] == [0, 1]
    for trajectory in trajectories:
        assert isinstance(trajectory, Trajectory) and trajectory.error_class != "retryable_infra"
        assert trajectory.stop_reason in set(StopReason) and len(trajectory.tokens) > trajectory.prompt_len
        assert len(trajectory.loss_mask) == len(trajectory.tokens) == len(trajectory.logprobs)


def assert_harness_json_drives_the_loops(base: Path, data: Path, out: Path) -> None:
    expected = policy_harness(TINY)
    assert read_policy_harness(base) == expected and expected.apps == APPS
    assert expected.harness == harness_config(TINY).model_copy(update={"seed": None})
    # harness.json, not bootstrap.json, is what every later reader takes
    changed = PolicyHarness(apps=("filesystem",), harness=expected.harness.model_copy(update={"max_turns": 7}))
    write_policy_harness(base, changed)
    assert read_policy_harness(base) == changed
    # a base cached before policies carried harness.json: a cache hit writes the file from the spec
    (base / HARNESS_FILE).unlink()
    assert bootstrap(TINY, data, out).cached and read_policy_harness(base) == expected


@pytest.mark.slow
@pytest.mark.timeout(1800)  # builds the default base when `make demo` has not (~9-15 min on 2 cores)
def test_default_bootstrap_leaves_room_for_rl(tmp_path):
    data = tmp_path / "data"
    build_environment(data)
    # The cache `make demo` fills: the key is the spec + environment content, so a cached base is this exact build.
    report = bootstrap(BootstrapSpec(), data, REPO / "models" / "base", progress=print).report
    toy = {row.split: row for row in report.eval or [] if row.tier == "toy"}
    assert 0.2 < toy["train"].pass_at_1 < 0.95
    assert toy["train"].copy_accuracy is not None and toy["train"].copy_accuracy > 0.8


def test_the_retention_set_is_the_bases_own_examples(small_data, tmp_path):
    """Drawn again from bootstrap.json and rendered with the saved tokenizer, every retention example is one the base
    trained on, each source holds its distinct examples, and the written file reads back."""
    spec = TINY.model_copy(
        update={
            "vocab_size": 600,
            "code_only_share": 0.5,
            "mcq_examples_per_question": 2,
            "terminal_examples_per_task": 2,
            "terminal_max_tokens_per_turn": 512,
        }
    )
    base = bootstrap(spec, small_data, tmp_path / "models").path
    imitation = draw_imitation_set(select_tasks(load_tasks(small_data), spec), small_data / "worlds", spec)
    taught = tokenize_imitation_set(imitation, spec)
    assert taught.tokenizer.get_vocab() == load_policy(base)[1].get_vocab()  # the tokenizer is rebuilt exactly
    trained_on = {tuple(example.tokens) for example in taught.examples}

    found = retention_examples(base, small_data, list(RetentionSource), per_source=1000)
    code_only = {id(t) for t in imitation.traces if t.harness is HarnessKind.CODE_ONLY}
    assert {source: len(examples) for source, examples in found.items()} == {
        RetentionSource.APP_TOOLS: len({id(t) for t in imitation.traces}) - len(code_only),
        RetentionSource.CODE_ONLY: len(code_only),
        RetentionSource.TERMINAL: len(imitation.terminal_tasks),
        RetentionSource.MCQ: len(imitation.mcq_rows),
    }
    assert all(tuple(e.tokens) in trained_on for examples in found.values() for e in examples)

    counts = write_retention_file(base, small_data, tmp_path / "r.jsonl", [RetentionSource.MCQ], per_source=3)
    assert counts == {"mcq": 3} and len(read_retention_file(tmp_path / "r.jsonl").examples) == 3
    with pytest.raises(NoRetentionSet, match="was taught no terminal examples"):
        retention_examples(
            bootstrap(TINY, small_data, tmp_path / "models").path, small_data, [RetentionSource.TERMINAL], 8
        )
    with pytest.raises(NoRetentionSet, match=r"has no bootstrap\.json"):
        retention_examples(tmp_path, small_data, [RetentionSource.MCQ], 8)
