"""Prefix cache: the next turn of a rollout reuses parked keys/values and samples exactly what a cold engine does."""

import asyncio
import random

import numpy as np
import pytest
import torch

from trainer.engine import Engine, EngineConfig, SamplingParams
from trainer.engine.forward import KVPool, ModelWeights
from trainer.engine.prefix_cache import PrefixCache, shared_prefix_lengths
from trainer.model import TinyModelSpec, bootstrap_policy

CORPUS = [f"turn {i}: the tool returned {i * 7 % 40} rows from sheet {i % 5}" for i in range(300)]
SPEC = TinyModelSpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=64, intermediate=128, max_position=512)


@pytest.fixture(scope="module")
def policy():
    return bootstrap_policy(CORPUS, SPEC, vocab_size=400)


def generate(engine: Engine, prompt: list[int], seed: int, n: int = 12):
    params = SamplingParams(temperature=1.0, seed=seed, max_tokens=n, ignore_eos=True)
    return asyncio.run(engine.generate(prompt, params))


def test_shared_prefix_lengths_by_hand():
    rows = np.array([[1, 2, 3, 4], [1, 2, 9, 4], [5, 2, 3, 4], [1, 2, -1, -1]])
    assert shared_prefix_lengths(rows, np.array([1, 2, 3, 4])).tolist() == [4, 2, 0, 2]
    assert shared_prefix_lengths(rows[:, :0], np.array([], dtype=np.int64)).tolist() == [0, 0, 0, 0]
    rng = random.Random(0)
    for _ in range(200):
        a = [rng.randrange(3) for _ in range(rng.randrange(1, 30))]
        b = a[: rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(len(a))]
        brute = next(i for i, (x, y) in enumerate(zip([*a, -2], b, strict=False)) if x != y)
        assert shared_prefix_lengths(np.array([b[: len(a)]]), np.array(a)).tolist() == [brute]


def test_multi_turn_rollout_reuses_each_turn_and_samples_what_a_cold_engine_samples(policy):
    model, tok = policy
    observation = tok.encode(" the tool returned 12 rows")
    with (
        Engine(model, tok, EngineConfig(max_num_seqs=2)) as cached,
        Engine(model, tok, EngineConfig(max_num_seqs=2, prefix_cache_slots=0)) as cold,
    ):
        prompt = tok.encode("turn 3: the tool returned")
        fed_before = 0  # tokens the previous turn fed to the model: its prompt and all its sampled tokens but the last
        for turn in range(3):
            hot, reference = generate(cached, prompt, seed=turn), generate(cold, prompt, seed=turn)
            assert hot.token_ids_T == reference.token_ids_T
            assert hot.logprobs_T == pytest.approx(reference.logprobs_T, abs=1e-5)
            assert reference.cached_tokens == 0 and hot.cached_tokens == fed_before
            fed_before = len(prompt) + len(hot.token_ids_T) - 1
            prompt = prompt + hot.token_ids_T + observation  # TITO: the next prompt extends this one token for token
        assert cached._prefix_cache is not None and cached._prefix_cache.hits == 2
        # The turns superseded each other: one parked sequence, the longest.
        assert len(cached._prefix_cache) == 1


def test_a_repeated_prompt_recomputes_only_its_last_token(policy):
    model, tok = policy
    prompt = tok.encode("turn 8: the tool returned 16 rows from sheet 3")
    with Engine(model, tok, EngineConfig(max_num_seqs=2)) as engine:
        first, again = generate(engine, prompt, seed=5), generate(engine, prompt, seed=5)
    assert again.cached_tokens == len(prompt) - 1
    assert again.token_ids_T == first.token_ids_T
    assert again.logprobs_T == pytest.approx(first.logprobs_T, abs=1e-5)


def test_weight_update_clears_the_cache(policy):
    model, tok = policy
    prompt = tok.encode("turn 2: the tool returned 14 rows")
    with Engine(model, tok, EngineConfig(max_num_seqs=2)) as engine:
        generate(engine, prompt, seed=1)
        engine.update_weights({k: v.clone() for k, v in model.state_dict().items()})
        assert generate(engine, prompt, seed=1).cached_tokens == 0  # parked keys/values were the old weights'


def test_least_recently_used_sequence_is_evicted(policy):
    model, _ = policy
    pool = KVPool(ModelWeights.from_hf(model, 64), n_slots=1, initial_capacity=8, n_parked=2)
    cache = PrefixCache(pool)
    assert pool.parked_slots == range(1, 3)
    running = pool.allocate()
    with torch.inference_mode():
        for value, tokens in ((1.0, [1, 2, 3]), (2.0, [4, 5, 6]), (3.0, [7, 8, 9])):
            pool.k[:, running] = value
            if tokens == [7, 8, 9]:
                assert cache.lookup([1, 2, 3, 0]) is not None  # touch [1, 2, 3]: [4, 5, 6] is now the oldest
            cache.park(running, tokens)
    assert cache.lookup([4, 5, 6, 0]) is None  # evicted
    hit = cache.lookup([7, 8, 9, 10])
    assert hit is not None and hit.n_tokens == 3 and torch.all(pool.k[:, hit.parked_slot, :, :3] == 3.0)
    hit = cache.lookup([1, 2, 0])
    assert hit is not None and hit.n_tokens == 2 and torch.all(pool.k[:, hit.parked_slot, :, :3] == 1.0)
    with torch.inference_mode():
        cache.restore(hit, running)
    assert torch.all(pool.k[:, running, :, :2] == 1.0) and cache.reused_tokens == 2


def test_superseded_turns_free_their_slots(policy):
    """Each turn supersedes the last: its slot must return to the free list, or a long rollout would use up the
    parked slots and evict other rollouts' prefixes."""
    model, _ = policy
    pool = KVPool(ModelWeights.from_hf(model, 64), n_slots=1, initial_capacity=8, n_parked=2)
    cache = PrefixCache(pool)
    running = pool.allocate()
    turns = [[1, 2, 3, 4, 5, 6][:n] for n in range(1, 7)]
    for tokens in [*turns, [9, 9]]:
        cache.park(running, tokens)
    assert len(cache) == 2
    assert cache.lookup([1, 2, 3, 4, 5, 6, 0]).n_tokens == 6 and cache.lookup([9, 9, 0]).n_tokens == 2


def test_a_long_fresh_prompt_beside_a_cached_one_never_pads_past_the_context(policy):
    """Admitted together, rows are right-padded to the widest new part: a row with a long cached prefix would get
    padded positions past the RoPE table (an IndexError that failed every request of the step). Such a prompt now
    waits for the next step, and both requests finish."""
    model, tok = policy
    limit = 96
    with Engine(model, tok, EngineConfig(max_num_seqs=4, max_model_len=limit)) as engine:
        long_prefix = [5] * 70
        first = generate(engine, long_prefix, seed=0, n=4)
        extended = long_prefix + first.token_ids_T + [7, 8]  # 76 tokens, all but 2 cached
        fresh = [9] * 60  # 60 new tokens: 70 cached + 60 padded would reach position 130 > 96

        async def both():
            params = SamplingParams(temperature=1.0, seed=1, max_tokens=8, ignore_eos=True)
            return await asyncio.gather(engine.generate(extended, params), engine.generate(fresh, params))

        hot, cold = asyncio.run(both())
    assert hot.cached_tokens > 0 and len(hot.token_ids_T) == len(cold.token_ids_T) == 8
