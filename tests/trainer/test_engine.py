"""Local engine: logprobs and greedy decoding equal transformers', continuous batching, seeds, weights, pause."""

import asyncio
import logging
import shutil

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import Qwen3ForCausalLM

from trainer.engine import Engine, EngineConfig, EngineRequestError, FinishReason, PauseMode, SamplingParams
from trainer.engine import forward as forward_module
from trainer.engine.engine import width_buckets
from trainer.engine.forward import (
    KVPool,
    ModelWeights,
    compiled_decode_step,
    decode,
    decode_step,
    forward,
)
from trainer.engine.sampling import inverse_cdf_sample, top_p_filter
from trainer.model import TinyModelSpec, bootstrap_policy, build_tiny_model, save_policy
from trainer.tokenizer import special_token_ids

CORPUS = [f"deal {i}: the board approved {i * 3 % 50} shares at {i % 9}.5 usd" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=512)
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def policy():
    return bootstrap_policy(CORPUS, SPEC, vocab_size=400)


@pytest.fixture(scope="module")
def prompts(policy):
    _, tok = policy
    texts = ["deal 3: the board", "deal 41: the board approved 23 shares at 5.5 usd and then", "the"]
    return [tok.encode(t) for t in texts]


@pytest.fixture(params=[False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"])
def engine(request, policy):
    """Every engine test runs with the eager decode step and (slow: the first compile costs ~35 s on 2 cores; compile
    is opt-in) with the torch.compile'd one."""
    if request.param and not (shutil.which("c++") or shutil.which("g++")):
        pytest.skip("torch.compile's C++ backend needs a C++ compiler")
    model, tok = policy
    with Engine(model, tok, EngineConfig(max_num_seqs=4, kv_initial_capacity=16, compile=request.param)) as eng:
        yield eng
        # A failed compilation falls back to eager silently but for a warning: make sure this one really compiled.
        assert eng._decode_step is (compiled_decode_step() if request.param else decode_step)


def hf_logprobs(model: Qwen3ForCausalLM, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(completion_t | prefix) from one plain transformers forward over prompt + completion."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logprobs.gather(-1, torch.tensor(completion)[:, None])[:, 0]


def hf_greedy(model: Qwen3ForCausalLM, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


def run(coro):
    return asyncio.run(coro)


async def gather(engine, prompts, params_list):
    return await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, params_list, strict=True)))


def test_sampled_logprobs_equal_a_plain_hf_forward(engine, policy, prompts):
    model, _ = policy
    params = [
        SamplingParams(temperature=1.0, seed=i, max_tokens=n, ignore_eos=True) for i, n in enumerate((40, 25, 60))
    ]
    results = run(gather(engine, prompts, params))
    deltas = torch.cat(
        [
            (hf_logprobs(model, p, r.token_ids_T) - torch.tensor(r.logprobs_T)).abs()
            for p, r in zip(prompts, results, strict=True)
        ]
    )
    assert len(deltas) == 125
    assert deltas.mean() < 1e-5 and deltas.max() < 1e-4


def test_greedy_equals_hf_generate_under_concurrency(engine, policy, prompts):
    model, _ = policy
    lengths = (30, 5, 17)
    results = run(gather(engine, prompts, [GREEDY.model_copy(update={"max_tokens": n}) for n in lengths]))
    for prompt, n, result in zip(prompts, lengths, results, strict=True):
        assert result.token_ids_T == hf_greedy(model, prompt, n)
        assert result.finish_reason is FinishReason.length and result.prompt_token_ids == prompt


def test_more_requests_than_slots_queue_and_finish(policy, prompts):
    model, tok = policy
    lengths = [3, 17, 9, 1, 12]
    with Engine(model, tok, EngineConfig(max_num_seqs=2)) as eng:
        batch = run(
            gather(
                eng, [prompts[i % 3] for i in range(5)], [GREEDY.model_copy(update={"max_tokens": n}) for n in lengths]
            )
        )
        solo = [
            run(eng.generate(prompts[i % 3], GREEDY.model_copy(update={"max_tokens": n})))
            for i, n in enumerate(lengths)
        ]
        assert eng._pool.n_free == 2  # every slot came back
    assert [len(r.token_ids_T) for r in batch] == lengths
    assert [r.token_ids_T for r in batch] == [r.token_ids_T for r in solo]


def test_width_buckets_by_hand():
    assert width_buckets([]) == []
    assert width_buckets([7]) == [(0, 1)]
    # 5 ≤ 1.25·4; 6 > 5 opens a run; 10 > 7.5; 12 ≤ 12.5; 100 > 12.5
    assert width_buckets([4, 5, 6, 10, 12, 100]) == [(0, 2), (2, 3), (3, 5), (5, 6)]
    widths = sorted(torch.randint(1, 512, (64,), generator=torch.Generator().manual_seed(0)).tolist())
    buckets = width_buckets(widths)
    assert [i for a, b in buckets for i in range(a, b)] == list(range(64))  # every row once, in order
    padded = sum((b - a) * widths[b - 1] for a, b in buckets)
    assert padded <= 1.25 * sum(widths) < 64 * max(widths)


def test_a_burst_of_ragged_prompts_equals_one_at_a_time(policy):
    """Admitted together, the prompts get slots shortest first and are prefilled in width runs; every greedy
    completion equals the same request served alone."""
    model, tok = policy
    generator = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    burst = [torch.randint(2, vocab, (n,), generator=generator).tolist() for n in (40, 2, 90, 9, 45, 11, 3, 70)]
    params = GREEDY.model_copy(update={"max_tokens": 6})
    with Engine(model, tok, EngineConfig(max_num_seqs=8, prefix_cache_slots=0)) as eng:
        together = run(gather(eng, burst, [params] * len(burst)))
        alone = [run(eng.generate(p, params)) for p in burst]
    assert [r.token_ids_T for r in together] == [r.token_ids_T for r in alone]
    assert [r.prompt_token_ids for r in together] == burst


def test_seeded_sampling_is_reproducible(engine, prompts):
    def sample(seed):
        return run(
            engine.generate(prompts[0], SamplingParams(temperature=1.0, seed=seed, max_tokens=20, ignore_eos=True))
        )

    first, again, other = sample(7), sample(7), sample(8)
    # `again` reuses `first`'s parked prompt (prefix cache): its last prompt token runs through another kernel, so
    # logprobs agree to float rounding, not bit for bit; the draws are the same.
    assert again.cached_tokens == len(prompts[0]) - 1
    assert first.token_ids_T == again.token_ids_T and first.logprobs_T == pytest.approx(again.logprobs_T, abs=1e-5)
    assert first.token_ids_T != other.token_ids_T


def test_top_p_filter_by_hand():
    probs = torch.tensor([0.1, 0.5, 0.15, 0.25])
    # sorted: 0.5, 0.25, 0.15, 0.1; mass before each: 0, 0.5, 0.75, 0.9 → top_p=0.7 keeps 0.5 and 0.25.
    assert torch.allclose(top_p_filter(probs, 0.7), torch.tensor([0.0, 2 / 3, 0.0, 1 / 3]))
    assert torch.equal(top_p_filter(probs, 1.0), probs)


def test_tiny_top_p_is_greedy_and_logprobs_are_raw(engine, prompts):
    greedy = run(engine.generate(prompts[1], GREEDY.model_copy(update={"max_tokens": 15})))
    nucleus = run(
        engine.generate(prompts[1], SamplingParams(temperature=2.0, top_p=1e-6, max_tokens=15, ignore_eos=True))
    )
    assert nucleus.token_ids_T == greedy.token_ids_T
    assert nucleus.logprobs_T == pytest.approx(greedy.logprobs_T, abs=1e-6)  # raw, not tempered: same numbers


def test_top_logprobs_are_the_k_best_raw_logprobs(engine, policy, prompts):
    model, _ = policy
    result = run(engine.generate(prompts[0], GREEDY.model_copy(update={"max_tokens": 3, "logprobs": 4})))
    with torch.no_grad():
        first = torch.log_softmax(model(torch.tensor([prompts[0]])).logits[0, -1], dim=-1)
    values, ids = first.topk(4)
    assert list(result.top_logprobs_T[0]) == ids.tolist()
    assert list(result.top_logprobs_T[0].values()) == pytest.approx(values.tolist(), abs=1e-5)
    assert result.token_ids_T[0] == ids[0]  # greedy picks the best


def test_stop_token_ids_and_stop_strings(engine, policy, prompts):
    _, tok = policy
    seeded = SamplingParams(temperature=1.0, seed=3, max_tokens=20, ignore_eos=True)  # varied tokens, reproducible
    sampled = run(engine.generate(prompts[1], seeded)).token_ids_T
    i = next(i for i in range(2, 20) if sampled[i] not in sampled[:i])
    stopped = run(engine.generate(prompts[1], seeded.model_copy(update={"stop_token_ids": (sampled[i],)})))
    assert stopped.token_ids_T == sampled[: i + 1]
    assert (stopped.finish_reason, stopped.stop_reason) == (FinishReason.stop, sampled[i])
    stop = tok.decode(sampled[: i + 1])[-3:]
    by_string = run(engine.generate(prompts[1], seeded.model_copy(update={"stop": (stop,)})))
    assert by_string.stop_reason == stop and stop in tok.decode(by_string.token_ids_T)
    assert stop not in tok.decode(by_string.token_ids_T[:-1]) and len(by_string.token_ids_T) <= i + 1


def test_eos_stops_unless_ignored(policy, prompts):
    model, tok = policy
    greedy = hf_greedy(model, prompts[2], 6)
    model.generation_config.eos_token_id = [greedy[4]]  # pretend the 5th greedy token is the EOS
    try:
        with Engine(model, tok) as eng:
            result = run(eng.generate(prompts[2], SamplingParams(temperature=0.0, max_tokens=6)))
            ignored = run(eng.generate(prompts[2], GREEDY.model_copy(update={"max_tokens": 6})))
    finally:
        model.generation_config.eos_token_id = [special_token_ids(tok)[t] for t in ("<|im_end|>", "<|endoftext|>")]
    first_eos = greedy.index(greedy[4])
    assert result.token_ids_T == greedy[: first_eos + 1] and result.finish_reason is FinishReason.stop
    assert result.stop_reason is None and ignored.token_ids_T == greedy


def test_context_limit_and_bad_requests_are_refused(policy):
    model, tok = policy
    with Engine(model, tok, EngineConfig(max_model_len=32)) as eng:
        with pytest.raises(EngineRequestError, match=r"prompt \(30 tokens\) \+ max_tokens \(3\) = 33 .* limit of 32"):
            run(eng.generate([5] * 30, SamplingParams(max_tokens=3)))
        filled = run(eng.generate([5] * 30, SamplingParams(temperature=0.0, ignore_eos=True)))
        assert len(filled.token_ids_T) == 2 and filled.finish_reason is FinishReason.length
        with pytest.raises(EngineRequestError, match="exceeds"):
            run(eng.generate([5] * 32, SamplingParams()))
        with pytest.raises(EngineRequestError, match=r"outside the vocabulary \[0, \d+\): \[-1, 100000\]"):
            run(eng.generate([1, 100000, -1], SamplingParams()))
        with pytest.raises(EngineRequestError, match="empty"):
            run(eng.generate([], SamplingParams()))
        assert run(eng.generate([5, 6], SamplingParams(max_tokens=2))).token_ids_T  # still serving
    with Engine(model) as no_tok, pytest.raises(EngineRequestError, match="stop strings need"):
        run(no_tok.generate([5], SamplingParams(stop=("x",))))


async def wait_running(engine, n):
    while engine.num_running < n:
        await asyncio.sleep(0.001)


def test_hot_weight_update_with_request_in_flight(engine, policy, prompts, tmp_path):
    model, tok = policy
    other = build_tiny_model(SPEC.model_copy(update={"seed": 5}), len(tok), special_token_ids(tok))
    original = {k: v.clone() for k, v in model.state_dict().items()}

    async def scenario():
        task = asyncio.create_task(engine.generate(prompts[0], GREEDY.model_copy(update={"max_tokens": 400})))
        await wait_running(engine, 1)
        version = await asyncio.to_thread(engine.update_weights, other.state_dict())
        return version, await task

    try:
        version, result = run(scenario())
        assert version == 1 and engine.version == 1
        assert (result.weight_version_start, result.weight_version) == (0, 1)
        assert len(result.token_ids_T) == 400
        # From a checkpoint folder: the engine now decodes exactly like the saved model.
        save_policy(other, tok, tmp_path / "other")
        assert engine.update_weights(tmp_path / "other") == 2
        fresh = run(engine.generate(prompts[1], GREEDY.model_copy(update={"max_tokens": 12})))
        assert fresh.token_ids_T == hf_greedy(other, prompts[1], 12) and fresh.weight_version == 2
    finally:
        model.load_state_dict(original)
    with pytest.raises(EngineRequestError, match="lack keys"):
        engine.update_weights({"model.norm.weight": torch.ones(64)})
    with pytest.raises(EngineRequestError, match="shapes differ"):
        engine.update_weights({**original, "model.norm.weight": torch.ones(3)})
    with pytest.raises(EngineRequestError, match=r"no \*\.safetensors"):
        engine.update_weights(tmp_path)


def test_pause_keep_freezes_and_resume_finishes_with_the_right_tokens(engine, policy, prompts):
    model, _ = policy
    lengths = (200, 150, 180)

    async def scenario():
        tasks = [
            asyncio.create_task(engine.generate(p, GREEDY.model_copy(update={"max_tokens": n})))
            for p, n in zip(prompts, lengths, strict=True)
        ]
        await wait_running(engine, 3)
        await asyncio.to_thread(engine.pause, PauseMode.keep)
        frozen = [len(s.token_ids) for s in engine._running]
        await asyncio.sleep(0.3)
        still = [len(s.token_ids) for s in engine._running]
        assert engine.paused and not any(t.done() for t in tasks)
        engine.resume()
        return frozen, still, await asyncio.gather(*tasks)

    frozen, still, results = run(scenario())
    assert frozen == still and len(frozen) == 3
    for prompt, n, result in zip(prompts, lengths, results, strict=True):
        assert result.token_ids_T == hf_greedy(model, prompt, n)


def test_pause_abort_and_cancel_free_their_slots(engine, prompts):
    async def scenario():
        running = asyncio.create_task(engine.generate(prompts[0], GREEDY.model_copy(update={"max_tokens": 500})))
        await wait_running(engine, 1)
        await asyncio.to_thread(engine.pause, PauseMode.abort)
        aborted = await running
        engine.resume()
        cancelled = asyncio.create_task(engine.generate(prompts[0], GREEDY.model_copy(update={"max_tokens": 500})))
        await wait_running(engine, 1)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        while engine.num_running:
            await asyncio.sleep(0.001)
        return aborted

    aborted = run(scenario())
    assert aborted.finish_reason is FinishReason.abort and len(aborted.token_ids_T) < 500
    assert engine._pool.n_free == 4


def test_inverse_cdf_sample_by_hand():
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 2.0]])
    # row 0 cdf: 0.1, 0.1, 0.7, 1.0 → u=0.05 → 0, u=0.1 → 2 (the zero-mass token 1 is skipped), u=0.95 → 3.
    assert inverse_cdf_sample(probs[[0, 0, 0]], torch.tensor([0.05, 0.1, 0.95])).tolist() == [0, 2, 3]
    # unnormalised row: cdf 0, 0, 0, 2 → any u picks token 3.
    assert inverse_cdf_sample(probs[[1]], torch.tensor([0.0])).tolist() == [3]
    # u = 1 (as rounding can produce): capped at the last token with mass, never the zero-mass tail.
    assert inverse_cdf_sample(torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([1.0])).tolist() == [1]


def test_a_failing_compiled_step_falls_back_to_eager_with_the_same_tokens(policy, prompts, caplog):
    model, tok = policy
    params = SamplingParams(temperature=1.0, seed=11, max_tokens=12, ignore_eos=True)
    with Engine(model, tok, EngineConfig(max_num_seqs=2)) as eager:
        expected = run(eager.generate(prompts[1], params))
    with Engine(model, tok, EngineConfig(max_num_seqs=2)) as eng:

        def broken_step(*args):
            raise RuntimeError("inductor: C++ compile failed")

        eng._decode_step = broken_step  # what a compiled step without a working compiler does on its first call
        with caplog.at_level(logging.WARNING, logger="trainer.engine.engine"):
            result = run(eng.generate(prompts[1], params))
        assert eng._decode_step is decode_step
    assert result.token_ids_T == expected.token_ids_T and result.logprobs_T == expected.logprobs_T
    assert "decoding eagerly" in caplog.text and "C++ compile failed" in caplog.text


@pytest.mark.parametrize("attention", ["kernel", "torch"])
def test_decode_step_equals_the_general_forward(policy, prompts, attention, monkeypatch):
    """The pure decode step (cache read-only, own key attended separately) against `forward` with T = 1, with the C++
    decode kernel and with `attend` (what a machine without a compiler runs)."""
    if attention == "torch":
        monkeypatch.setattr(forward_module, "decode_attention_op", lambda: None)
    model, _ = policy
    weights = ModelWeights.from_hf(model, 64)
    pools = [KVPool(weights, n_slots=3, initial_capacity=8) for _ in range(2)]
    width = max(len(p) for p in prompts)
    padded = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    lengths = torch.tensor([len(p) for p in prompts])
    tokens_B = torch.tensor([5, 17, 101])
    for pool in pools:
        for _ in prompts:
            pool.allocate()
        forward(weights, pool, 0, padded, torch.zeros(3, dtype=torch.long), lengths - 1)
    reference = forward(weights, pools[0], 0, tokens_B[:, None], lengths, torch.zeros(3, dtype=torch.long))
    logits = decode(weights, pools[1], 0, tokens_B, lengths)
    assert (logits - reference).abs().max() < 1e-5
    for cache in ("k", "v"):  # the new keys/values landed where `forward` puts them (and nothing else moved)
        assert (getattr(pools[0], cache) - getattr(pools[1], cache)).abs().max() < 1e-5


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("c++") or shutil.which("g++")), reason="torch.compile needs a C++ compiler")
def test_compiled_step_compiles_once_for_batch_1_and_once_for_any_larger_batch(policy, prompts):
    """Batch sizes, past lengths and cache growth must not recompile (each compile costs ~10 s), and the compiled
    step's logits equal the eager step's."""
    model, _ = policy
    weights = ModelWeights.from_hf(model, 256)
    pools = {name: KVPool(weights, n_slots=4, initial_capacity=4) for name in ("eager", "compiled")}
    for pool in pools.values():
        for _ in range(4):
            pool.allocate()
    graphs_before = counters["stats"]["unique_graphs"]
    # Batch 4 == the slot count first (the coincidence duck sizing would bake in), then 3, 1, 2; positions past the
    # initial capacity of 4 make the pool grow between calls.
    for step, batch in enumerate((4, 4, 3, 1, 2, 4, 1, 3)):
        tokens_B = torch.tensor(prompts[0][:batch] + [7] * (batch - len(prompts[0][:batch])))
        pos_B = torch.full((batch,), 2 + step)  # past lengths 0 and 1 would specialise (as batch 1 does)
        eager = decode(weights, pools["eager"], 0, tokens_B, pos_B)
        compiled = decode(weights, pools["compiled"], 0, tokens_B, pos_B, compiled_decode_step())
        assert (compiled - eager).abs().max() < 1e-5
    assert counters["stats"]["unique_graphs"] - graphs_before <= 2


def test_kv_pool_release_moves_the_last_slot_into_the_hole(policy):
    model, _ = policy
    pool = KVPool(ModelWeights.from_hf(model, 32), n_slots=3, initial_capacity=4)
    assert [pool.allocate() for _ in range(3)] == [0, 1, 2] and pool.n_free == 0
    with torch.inference_mode():  # the cache holds inference tensors, as the engine writes them
        pool.k[:, 2] = 7.0
    assert pool.release(0) == 2 and torch.all(pool.k[:, 0] == 7.0)  # slot 2's sequence now lives in slot 0
    assert pool.release(1) is None and pool.n_free == 2 and pool.allocate() == 1
    with torch.inference_mode():
        pool.k[:, 1] = 5.0
    assert pool.release(0, moved_length=3) == 1  # only the moved sequence's 3 live positions are copied
    assert torch.all(pool.k[:, 0, :, :3] == 5.0) and torch.all(pool.k[:, 0, :, 3] == 7.0)


@pytest.mark.parametrize("compile", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"])
def test_a_ragged_batch_decodes_hf_generates_tokens(policy, compile):
    """Rows of different lengths in one decode batch (each attending only to its own cached keys), rows finishing and
    refilled mid-way: every request's greedy tokens are what transformers' generate gives it alone, and its logprobs a
    plain forward's."""
    if compile and shutil.which("c++") is None:
        pytest.skip("torch.compile's C++ backend needs a C++ compiler")
    model, tok = policy
    words = tok.encode(" ".join(CORPUS))
    prompts = [words[: 1 + (37 * i) % 150] for i in range(36)]
    lengths = [4 + (11 * i) % 29 for i in range(36)]
    with Engine(model, tok, EngineConfig(max_num_seqs=20, compile=compile)) as eng:
        results = run(gather(eng, prompts, [GREEDY.model_copy(update={"max_tokens": n}) for n in lengths]))
    for prompt, n, result in zip(prompts, lengths, results, strict=True):
        assert result.token_ids_T == hf_greedy(model, prompt, n)
        deltas = (hf_logprobs(model, prompt, result.token_ids_T) - torch.tensor(result.logprobs_T)).abs()
        assert deltas.max() < 1e-4
