"""The inference engine's input buffers: one round's rows, copied out of the gatherer's
Batch (w3async.learn.inference), read by the CPU path and the CUDA runner
(w3async.learn.inference.cuda_runner) alike."""

from __future__ import annotations

import numpy as np
import torch

from w3async.games.spec import GameSpec
from w3async.learn.network import Obs
from w3async.sync.gather import Batch
from w3async.sync import layout


class Inputs:
    """One set of input buffers, capacity rows of the run's shape at its e_max, as torch
    tensors with numpy views of the same memory (pinned on CUDA, so the upload is
    asynchronous)."""

    def __init__(self, capacity: int, pin: bool, lay: layout.Layout = layout.DEFAULT):
        def z(shape, dtype):
            return torch.zeros(shape, dtype=dtype, pin_memory=pin)

        self.rows = z(capacity, torch.int64)
        self.obs_seq = np.zeros(capacity, np.uint64)
        self.flags = z(capacity, torch.int32)
        self.net = z(capacity, torch.int16)
        self.glob = z((capacity, lay.g_glob), torch.float32)
        self.ent = z(capacity * lay.e_max * lay.f_ent, torch.float32)
        self.ent_type = z(capacity * lay.e_max, torch.int16)
        self.n_ent = z(capacity, torch.int32)
        self.mask = z((capacity, lay.n_heads, lay.head_max), torch.uint8)
        self.np = {k: v.numpy() for k, v in vars(self).items() if isinstance(v, torch.Tensor)}
        self.f_ent = lay.f_ent

    def obs(self, n: int, bucket: int) -> Obs:
        """Views of the first n rows as the network's input (CPU tensors)."""
        return Obs(
            self.glob[:n],
            self.ent[: n * bucket * self.f_ent].view(n, bucket, self.f_ent),
            self.ent_type[: n * bucket].view(n, bucket).long(),
            self.n_ent[:n].long(),
            self.mask[:n].bool(),
        )


def synthetic_batch(spec: GameSpec, n: int, rng: np.random.Generator, max_ent: int = 48, batch: Batch | None = None,
                    n_table_rows: int | None = None) -> Batch:
    """A Batch of n valid random rows as a gatherer would make it (padding zeroed, masks
    with an allowed choice per head, pointer masks on real entities): for tests and
    benchmarks."""
    lay = spec.layout
    b = batch if batch is not None else Batch(max(n, n_table_rows or n), lay)
    b.n = n
    n_ent = rng.integers(0, min(max_ent, lay.e_max) + 1, n)
    b.bucket = next(x for x in lay.buckets if x >= (int(n_ent.max()) if n else 0))
    b.rows[:n] = np.arange(n)
    b.obs_seq[:n] = rng.integers(1, 1 << 30, n)
    b.flags[:n] = 0
    b.n_ent[:n] = n_ent
    b.glob[:n] = rng.standard_normal((n, lay.g_glob), dtype=np.float32)
    real = np.arange(b.bucket)[None, :] < n_ent[:, None]
    b.ent[:] = rng.standard_normal((n, b.bucket, lay.f_ent), dtype=np.float32) * real[:, :, None]
    b.ent_type[:] = rng.integers(0, spec.n_types, (n, b.bucket)) * real
    b.mask[:n] = 0
    for h, size in enumerate(spec.head_sizes):
        m = rng.random((n, size)) < 0.5
        if h == spec.pointer_head:
            m[:, : b.bucket] &= real
            m[:, b.bucket :] = False
        m[:, 0] = True
        b.mask[:n, h, :size] = m
    return b
