"""Our harness as SkyRL's generator (``trainer/skyrl/generator.py``), driven the way SkyRL drives it: a batch built
by SkyRL's own ``prepare_generator_input``, our in-process tiny engine behind the one method of SkyRL's inference
client the generator calls (``generate``: token ids in, ids + logprobs out), real world copies and tools. The output
must be exactly the trajectories ``run_group`` makes on the same engine, and pass SkyRL's own output checks.

Needs SkyRL (the ``cluster`` extra; skipped where it is not installed):

    .venv-cluster/bin/python -m pytest tests/trainer/skyrl/test_generator.py
"""

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("skyrl")

from envs.harness.agent import AgentSetup, HarnessConfig, run_group
from envs.harness.chat import ToolListing
from envs.rollout import local_envs
from envs.types import Domain, ErrorClass, FileExists, FileUnchanged, TaskSpec, Trajectory
from tests.trainer.torch_threads import one_torch_thread  # noqa: F401  (autouse: every test here)
from trainer.cluster.shards import ShardReader, ShardWriter
from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine.completions import EngineCompletions
from trainer.model import TinyModelSpec, bootstrap_policy
from trainer.skyrl.generator import (
    ENV_CLASS,
    TASK_ID_KEY,
    GeneratorOutput,
    RecipeGenerator,
    generator_output,
)

SPEC = TinyModelSpec(layers=1, hidden=32, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_position=2048)
HARNESS = HarnessConfig(
    tool_listing=ToolListing.COMPACT, max_turns=2, max_tokens_per_turn=8, context_budget_tokens=2048, seed=7
)
APPS = ("filesystem",)
TASKS = [
    TaskSpec(
        task_id="write-a",
        world_id="w",
        domain=Domain.GENERAL,
        prompt="Write out/a.txt with the Q1 revenue.",
        rubric=[FileExists(path="out/a.txt"), FileUnchanged(path="notes/q1.txt")],
    ),
    TaskSpec(
        task_id="keep-notes",
        world_id="w",
        domain=Domain.GENERAL,
        prompt="Read notes/q1.txt and answer with the revenue; change nothing.",
        rubric=[FileUnchanged(path="notes/q1.txt")],
    ),
]
SAMPLES = 2


class EngineAsSkyRLClient:
    """Our ``Engine`` behind SkyRL's ``InferenceEngineInterface.generate``: each prompt one request, the vLLM
    sampling fields the generator sends, logprobs when ``logprobs`` is not None (as SkyRL's remote client)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.requests: list[dict] = []

    async def generate(self, input_batch: dict, model: str | None = None) -> dict:
        params = input_batch["sampling_params"]
        self.requests.append(dict(params, model=model))
        ours = SamplingParams(
            temperature=params["temperature"],
            top_p=params["top_p"],
            seed=params["seed"],
            max_tokens=params["max_tokens"],
            stop_token_ids=tuple(params["stop_token_ids"]),
        )
        done = await asyncio.gather(*(self.engine.generate(ids, ours) for ids in input_batch["prompt_token_ids"]))
        return {
            "responses": [""] * len(done),
            "response_ids": [d.token_ids_T for d in done],
            "stop_reasons": [str(d.finish_reason) for d in done],
            "response_logprobs": [d.logprobs_T for d in done] if params.get("logprobs") is not None else None,
        }


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("worlds")
    (root / "w" / "filesystem" / "notes").mkdir(parents=True)
    (root / "w" / "apps_data").mkdir()
    (root / "w" / "filesystem" / "notes" / "q1.txt").write_text("Q1 revenue: 412.5 million\n")
    return root


@pytest.fixture(scope="module")
def policy():
    corpus = [t.prompt for t in TASKS] + [f"note {i}: revenue {i * 7 % 90}.5 million" for i in range(200)]
    return bootstrap_policy(corpus, SPEC, vocab_size=500)


def skyrl_batch() -> dict:
    """The batch SkyRL's trainer would send for our two tasks (its own ``prepare_generator_input``)."""
    from skyrl.backends.skyrl_train.inference_servers.engine_utils import get_sampling_params_for_backend
    from skyrl.train.config import SamplingParams as SkyRLSampling
    from skyrl.train.generators.utils import prepare_generator_input

    rows = [
        {
            "prompt": [{"role": "user", "content": task.prompt}],
            "env_class": ENV_CLASS,
            "env_extras": {TASK_ID_KEY: task.task_id},
            "uid": str(index),
        }
        for index, task in enumerate(TASKS)
    ]
    sampling = get_sampling_params_for_backend("vllm", SkyRLSampling())
    batch, _ = prepare_generator_input(rows, SAMPLES, sampling, ENV_CLASS, "train", global_step=3)
    return batch


def run_both(
    policy, worlds: Path, shards: Path | None = None
) -> tuple[GeneratorOutput, list[Trajectory], EngineAsSkyRLClient]:
    """The generator's output on SkyRL's batch, and ``run_group`` on the same engine, task by task."""
    model, tokenizer = policy
    agent = AgentSetup(None, tokenizer, HARNESS)  # the generator puts SkyRL's engine in

    def envs_for(task: TaskSpec):
        return local_envs(task, worlds, APPS)

    async def go():
        with Engine(model, tokenizer, EngineConfig(max_num_seqs=8, kv_initial_capacity=16)) as engine:
            client = EngineAsSkyRLClient(engine)
            tasks = {task.task_id: task for task in TASKS}
            writer = ShardWriter(shards) if shards else None
            generator = RecipeGenerator(client, agent, tasks, envs_for, model="policy", shards=writer)
            output = await generator.generate(skyrl_batch())
            ours = replace(agent, engine=EngineCompletions(engine))
            reference = [
                t
                for index, task in enumerate(TASKS)
                for t in await run_group(task, envs_for(task), ours, group_id=f"train3-{index}-{task.task_id}", n=2)
            ]
            return output, reference, client

    return asyncio.run(go())


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("shards")


@pytest.fixture(scope="module")
def generated(policy, worlds, shards):
    return run_both(policy, worlds, shards)


def test_a_training_batch_is_written_as_shards_under_its_step(generated, shards) -> None:
    """The stage that submitted the SkyRL job reads the batch's rollouts back into the run's catalog."""
    _, reference, _ = generated
    [step] = ShardReader(shards).changed()
    assert step.step == 3 and step.record is None  # SkyRL's step records come from its log, not the generator
    assert [t.tokens for t in step.trajectories] == [t.tokens for t in reference]


def test_the_output_is_exactly_our_trajectories(generated) -> None:
    output, reference, _ = generated
    assert len(reference) == len(TASKS) * SAMPLES
    assert all(t.error_class in (None, ErrorClass.MODEL) for t in reference), [t.error for t in reference]
    assert output["prompt_token_ids"] == [t.tokens[: t.prompt_len] for t in reference]
    assert output["response_ids"] == [t.tokens[t.prompt_len :] for t in reference]
    assert output["loss_masks"] == [t.loss_mask[t.prompt_len :] for t in reference]
    # The two runs share the engine but not its batches: fp32 sums differ in the last bits, never the sampled ids.
    for got, t in zip(output["rollout_logprobs"], reference, strict=True):
        assert got == pytest.approx(t.logprobs[t.prompt_len :], abs=1e-5)
    assert output["rewards"] == [t.reward for t in reference]
    assert output["stop_reasons"] == [str(t.stop_reason) for t in reference]
    assert [tid.to_string() for tid in output["trajectory_ids"]] == ["0_0", "0_1", "1_0", "1_1"]
    assert all(sum(mask) > 0 for mask in output["loss_masks"])  # every rollout sampled at least one turn


def test_every_turn_went_to_the_client_token_in_with_logprobs(generated) -> None:
    _, reference, client = generated
    turns = sum(len(t.turns) for t in reference)
    assert len(client.requests) == turns
    assert all(request["logprobs"] == 0 and request["model"] == "policy" for request in client.requests)
    assert all(request["max_tokens"] <= HARNESS.max_tokens_per_turn for request in client.requests)
    assert {request["min_p"] for request in client.requests} == {0.0}  # SkyRL's own vLLM defaults ride along


def test_the_output_passes_skyrls_checks(generated) -> None:
    output, _, _ = generated
    assert set(output) == set(GeneratorOutput.__annotations__)
    assert output["rollout_metrics"]["generate/avg_num_tokens"] > 0
    # SkyRL's trainer utilities import its training stack (torchdata, datasets): checked where that is installed.
    trainer_utils = pytest.importorskip("skyrl.train.utils.trainer_utils")
    trainer_utils.validate_generator_output(len(TASKS) * SAMPLES, output)


def test_the_output_maps_trajectories_field_by_field(generated) -> None:
    _, reference, _ = generated
    output = generator_output(reference)
    assert output["rollout_logprobs"] == [t.logprobs[t.prompt_len :] for t in reference]
    assert output["loss_masks"] == [t.loss_mask[t.prompt_len :] for t in reference]
    assert [p + r for p, r in zip(output["prompt_token_ids"], output["response_ids"], strict=True)] == [
        t.tokens for t in reference
    ]
    assert output["trajectory_generation_times"] == [t.llm_s + t.env_s for t in reference]


def test_untrainable_and_overlong_rollouts_are_masked_out(generated) -> None:
    _, reference, _ = generated
    broken = [t.model_copy(update={"error_class": "retryable_infra"}) for t in reference[:1]]
    cut = [t.model_copy(update={"stop_reason": "length"}) for t in reference[1:2]]
    masked = generator_output(broken + cut + reference[2:], overlong_filter=True)["loss_masks"]
    assert [sum(mask) for mask in masked[:2]] == [0, 0]
    kept = generator_output(cut, overlong_filter=False)["loss_masks"]
    assert kept == [reference[1].loss_mask[reference[1].prompt_len :]]


def test_a_row_without_its_task_id_is_refused(policy, worlds) -> None:
    batch = skyrl_batch()
    batch["env_extras"][0] = {}
    generator = RecipeGenerator(None, AgentSetup(None, policy[1], HARNESS), {}, lambda task: None)
    with pytest.raises(KeyError, match=TASK_ID_KEY):
        asyncio.run(generator.generate(batch))
