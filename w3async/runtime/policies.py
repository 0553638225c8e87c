"""Policies the supervisor can answer with before a network is involved.

A policy maps a gathered Batch to (actions (n, N_HEADS) int32, versions (n,) uint32).
"""

from __future__ import annotations

import numpy as np

from w3async.sync import layout
from w3async.sync.gather import Batch


class CheckPolicy:
    """The answers the null game recomputes (w3s_check_answer): a lost, stale or
    misrouted answer fails its check."""

    def __init__(self, capacity: int):
        self.versions = np.zeros(capacity, np.uint32)

    def __call__(self, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        n = b.n
        return layout.check_answer(b.obs_seq[:n], b.lane[:n], b.side[:n]), self.versions[:n]


class RandomPolicy:
    """Uniform over each head's allowed choices (Gumbel-max over the mask)."""

    def __init__(self, capacity: int, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.versions = np.zeros(capacity, np.uint32)

    def __call__(self, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        n = b.n
        scores = self.rng.random((n, layout.N_HEADS, layout.HEAD_MAX), dtype=np.float32)
        scores[b.mask[:n] == 0] = -1.0
        return scores.argmax(axis=2).astype(np.int32), self.versions[:n]
