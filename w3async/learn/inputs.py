"""The inference engine's input buffers: one round's rows, copied out of the gatherer's
Batch (w3async.learn.inference), read by the CPU path and the CUDA runner
(w3async.learn.cuda_runner) alike."""

from __future__ import annotations

import numpy as np
import torch

from w3async.learn.network import Obs
from w3async.sync import layout


class Inputs:
    """One set of input buffers, capacity rows at E_MAX, as torch tensors with numpy views
    of the same memory (pinned on CUDA, so the upload is asynchronous)."""

    def __init__(self, capacity: int, pin: bool):
        def z(shape, dtype):
            return torch.zeros(shape, dtype=dtype, pin_memory=pin)

        self.rows = z(capacity, torch.int64)
        self.obs_seq = np.zeros(capacity, np.uint64)
        self.flags = z(capacity, torch.int32)
        self.net = z(capacity, torch.int16)
        self.glob = z((capacity, layout.G_GLOB), torch.float32)
        self.ent = z(capacity * layout.E_MAX * layout.F_ENT, torch.float32)
        self.ent_type = z(capacity * layout.E_MAX, torch.int16)
        self.n_ent = z(capacity, torch.int32)
        self.mask = z((capacity, layout.N_HEADS, layout.HEAD_MAX), torch.uint8)
        self.np = {k: v.numpy() for k, v in vars(self).items() if isinstance(v, torch.Tensor)}

    def obs(self, n: int, bucket: int) -> Obs:
        """Views of the first n rows as the network's input (CPU tensors)."""
        return Obs(
            self.glob[:n],
            self.ent[: n * bucket * layout.F_ENT].view(n, bucket, layout.F_ENT),
            self.ent_type[: n * bucket].view(n, bucket).long(),
            self.n_ent[:n].long(),
            self.mask[:n].bool(),
        )
