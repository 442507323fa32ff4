"""Prefix-cache simulation: how many prompt tokens an (unbounded) prefix cache would serve.

A block of ``block`` tokens is a hit when the whole prefix up to and including it appeared in
an earlier request, which is what vLLM's chained block hashes and SGLang's radix tree do.
Prefix hashes are a linear hash with random per-position coefficients, so one cumulative sum
per request gives the hash of every block-aligned prefix.
"""

from __future__ import annotations

import numpy as np

_MAX = 1 << 20
_COEF = np.random.default_rng(20261129).integers(1, 2**63, size=_MAX, dtype=np.uint64) | np.uint64(1)


def block_prefix_hashes(ids: np.ndarray, block: int) -> np.ndarray:
    """Hash of every full block-aligned prefix of ``ids`` (uint64, one per full block)."""
    n = (len(ids) // block) * block
    if n == 0:
        return np.empty(0, np.uint64)
    if n > _MAX:
        raise ValueError(f"prompt of {n} tokens is longer than the simulator's {_MAX}")
    with np.errstate(over="ignore"):
        c = np.cumsum((ids[:n].astype(np.uint64) + np.uint64(1)) * _COEF[:n], dtype=np.uint64)
    return c[block - 1 :: block]


class PrefixCacheSim:
    """Feed requests in arrival order; counts hit blocks per request (infinite capacity)."""

    def __init__(self, block: int):
        if block < 1:
            raise ValueError("block size must be >= 1")
        self.block = block
        self._seen: set[int] = set()
        self.hit_tokens = 0
        self.prompt_tokens = 0

    def add(self, hashes: np.ndarray, prompt_tokens: int) -> int:
        """Record one request (its block prefix hashes); return its cached tokens."""
        hits = 0
        seen = self._seen
        for h in hashes.tolist():
            if h in seen:
                hits += 1
            else:
                break
        seen.update(hashes.tolist())
        cached = hits * self.block
        self.hit_tokens += cached
        self.prompt_tokens += prompt_tokens
        return cached

    @property
    def fraction(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def cached_fraction(seqs: list[np.ndarray], block: int, prompt_tokens: np.ndarray | None = None) -> float:
    """Cached-prefix fraction of a list of token-id arrays in arrival order."""
    sim = PrefixCacheSim(block)
    for i, ids in enumerate(seqs):
        sim.add(block_prefix_hashes(ids, block), int(prompt_tokens[i]) if prompt_tokens is not None else len(ids))
    return sim.fraction


def trace_block_reuse(hash_ids: list[list[int]], prompt_tokens: np.ndarray, block: int) -> float:
    """A trace's own reuse: tokens in full blocks whose whole prefix chain of block ids was seen
    in an earlier request, over all prompt tokens (the quantity the pool must reproduce)."""
    sim = PrefixCacheSim(block)
    for ids, n in zip(hash_ids, prompt_tokens.tolist()):
        full = min(len(ids), n // block)
        arr = np.asarray(ids[:full], dtype=np.int64).view(np.uint64)
        sim.add(block_prefix_hashes(arr, 1), int(n))  # one hash per block id; add() counts block tokens
    return sim.fraction
