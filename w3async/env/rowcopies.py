"""The bridge's copies of each row's observation, in two banks a row.

A row's bank `bank[r]` holds the last observation handed out to the caller; a post goes
into the other bank. So the observation a cut row reports (its game ended mid-episode:
the last one handed out, env/bridge.py) is still there when the new game posts, without
copying every handed-out observation aside at each step: that copy was a fifth of
step()'s time on the caller's thread with 8 null games.

Every hand-out is one fancy-indexed read a field (a fresh array: the caller may keep or
change it), every post one write a field: numpy's per-call cost, not the bytes, is what
a step of 16 rows pays for.
"""

from __future__ import annotations

import numpy as np

from w3async.env.spaces import OBS_KEYS
from w3async.sync import layout
from w3async.sync.gather import Batch


class RowCopies:
    """Two banks of (glob, ent, ent_type, n_ent, mask) for n rows; every method is called
    with the bridge's condition held."""

    def __init__(self, n: int):
        self.glob = np.zeros((2, n, layout.G_GLOB), np.float32)
        self.ent = np.zeros((2, n, layout.E_MAX, layout.F_ENT), np.float32)
        self.ent_type = np.zeros((2, n, layout.E_MAX), np.int16)
        self.n_ent = np.zeros((2, n), np.int64)
        self.mask = np.zeros((2, n, layout.N_HEADS, layout.HEAD_MAX), np.uint8)
        self.bank = np.zeros(n, np.int64)  # the bank of each row's last observation handed out
        # How far each bank's entities may be non-zero: a post of a smaller bucket zeroes
        # the rest only when a larger one was written there before (a batch is zero past
        # n_ent up to its bucket; the bank past that must be too).
        self.ent_hi = np.zeros((2, n), np.int64)
        self._fields = tuple(getattr(self, k) for k in OBS_KEYS)

    def put(self, rows: np.ndarray, b: Batch) -> None:
        """The batch's first len(rows) rows, posted for these table rows."""
        n, bucket = len(rows), b.bucket
        w = self.bank[rows] ^ 1
        self.glob[w, rows] = b.glob[:n]
        self.ent[w, rows, :bucket] = b.ent
        self.ent_type[w, rows, :bucket] = b.ent_type
        stale = self.ent_hi[w, rows] > bucket
        if stale.any():
            self.ent[w[stale], rows[stale], bucket:] = 0
            self.ent_type[w[stale], rows[stale], bucket:] = 0
        self.ent_hi[w, rows] = bucket
        self.n_ent[w, rows] = b.n_ent[:n]
        self.mask[w, rows] = b.mask[:n]

    def hand_out(self, rows: np.ndarray, cut: np.ndarray | None) -> dict:
        """The observations of these rows, as new arrays: each row's post, or for a cut
        row (cut[i] True) the last one handed out. The posts become the last handed out."""
        src = self.bank[rows] ^ 1
        if cut is not None:
            src[cut] ^= 1
        obs = {k: a[src, rows] for k, a in zip(OBS_KEYS, self._fields)}
        self.bank[rows] = src
        return obs
