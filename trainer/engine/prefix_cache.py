"""Prefix caching for multi-turn rollouts: keep finished requests' keys/values and reuse them for the next turn.

Turn N+1 of an agent rollout is, token for token, turn N's prompt + its completion + the observation (TITO). Without
a cache every turn prefills the whole growing context again; with it, a request whose prompt *extends* a parked
sequence copies that sequence's keys/values into its own slot and prefills only the new tokens. (vLLM's automatic
prefix caching shares hashed KV blocks; a slot cache gets the same reuse for the case that dominates rollouts, with
plain copies: a few hundred KB per turn for a tiny model.)

Parked sequences live in KV slots of their own, after the running slots of the same `KVPool`; when all are taken the
least recently used is overwritten. A prompt reuses the parked sequence it shares the longest common prefix with (the
keys/values of position i depend only on tokens 0 .. i): a whole previous turn, or the shared task prompt of a sample
of the same group. The last token of a prompt is always recomputed (its logits start the completion). Keys/values
depend on the weights, so `clear` must run on every weight update.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainer.engine.forward import KVPool


@dataclass(frozen=True)
class PrefixHit:
    parked_slot: int
    n_tokens: int  # leading prompt tokens whose keys/values the parked slot holds


class PrefixCache:
    """Parked sequences in the parked slots of `pool`, least recently used first."""

    def __init__(self, pool: KVPool) -> None:
        self._pool = pool
        self._free = list(reversed(pool.parked_slots))
        self._parked: OrderedDict[int, list[int]] = OrderedDict()  # slot -> the tokens whose keys/values it holds
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._parked)

    @torch.inference_mode()  # the cache holds inference tensors
    def park(self, slot: int, tokens: Sequence[int]) -> None:
        """Copy the keys/values of positions 0 .. len(tokens) - 1 of running `slot`; parked prefixes of `tokens`
        are dropped (the new entry serves every prompt they would)."""
        if not tokens:
            return
        tokens = list(tokens)
        for parked, held in list(self._parked.items()):
            if len(held) <= len(tokens) and tokens[: len(held)] == held:
                del self._parked[parked]
                self._free.append(parked)
        target = self._free.pop() if self._free else self._parked.popitem(last=False)[0]
        self._copy(slot, target, len(tokens))
        self._parked[target] = tokens

    def lookup(self, prompt: Sequence[int]) -> PrefixHit | None:
        """The parked sequence sharing the longest common prefix with `prompt` (at most len(prompt) - 1 tokens
        reused); None if no parked sequence shares a first token."""
        prompt = list(prompt)
        best_slot, best_n = -1, 0
        for parked, held in self._parked.items():
            n = common_prefix_length(prompt, held)
            if n > best_n:
                best_slot, best_n = parked, n
        best_n = min(best_n, len(prompt) - 1)
        if best_n < 1:
            return None
        self._parked.move_to_end(best_slot)
        return PrefixHit(best_slot, best_n)

    @torch.inference_mode()
    def restore(self, hit: PrefixHit, slot: int) -> None:
        """Copy the hit's keys/values into running `slot`."""
        self._copy(hit.parked_slot, slot, hit.n_tokens)
        self.hits += 1
        self.reused_tokens += hit.n_tokens

    def clear(self) -> None:
        self._free.extend(self._parked)
        self._parked.clear()

    def _copy(self, source: int, target: int, n_tokens: int) -> None:
        self._pool.ensure_capacity(n_tokens)
        self._pool.k[:, target, :, :n_tokens] = self._pool.k[:, source, :, :n_tokens]
        self._pool.v[:, target, :, :n_tokens] = self._pool.v[:, source, :, :n_tokens]


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """max n with a[:n] == b[:n], by bisection over slice comparisons (C-speed; O(n log n) element compares)."""
    low, high = 0, min(len(a), len(b))  # invariant: a[:low] == b[:low], and a[:high] != b[:high] unless high is max
    if a[:high] == b[:high]:
        return high
    while high - low > 1:
        middle = (low + high) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle
    return low
