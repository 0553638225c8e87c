"""What crosses the network for a round of a game host: its gathered rows, compact.

A host sends only the filled part of a gathered Batch: the entities up to the batch's
largest n_ent (not the padding bucket), the masks as bits, narrow integer types; the
centre unpacks it into a Batch of its own, rows moved to the run's global numbering,
entities padded back to the bucket (zero past each row's n_ent, as a gather leaves
them). Both ends are numpy: Ray moves the arrays without pickling their bytes one by one.
"""

from __future__ import annotations

import numpy as np

from w3async.sync import layout
from w3async.sync.gather import Batch

_SCALARS = {  # field: its dtype on the wire (the batch's own where narrowing could lose)
    "rows": np.int32, "obs_seq": np.uint64, "lane": np.uint32, "side": np.uint8, "episode": np.uint64,
    "step": np.uint32, "flags": np.uint8, "reward": np.float32, "n_ent": np.uint16, "state_hash": np.uint64,
    "discarded": np.uint32,
}


def pack(b: Batch, gen: np.ndarray) -> dict:
    """The filled part of b as plain arrays; gen: each row's generation on the host
    (a round's answer must name it, so that it never lands on a restarted game)."""
    n = b.n
    m = max(int(b.n_ent[:n].max()), 1) if n else 1
    msg = {k: getattr(b, k)[:n].astype(t, copy=True) for k, t in _SCALARS.items()}
    msg.update(kind="batch", n=n, bucket=b.bucket, gen=np.asarray(gen, np.uint32).copy(),
               glob=b.glob[:n].copy(), ent=b.ent[:, :m].copy(), types=b.ent_type[:, :m].copy(),
               mask=np.packbits(b.mask[:n], axis=2))
    return msg


def unpack(msg: dict, into: Batch, row_offset: int) -> Batch:
    """Fill `into` (capacity >= msg's n) from a packed message; rows + row_offset."""
    n, bucket = int(msg["n"]), int(msg["bucket"])
    if n > into.capacity:
        raise ValueError(f"a packed batch of {n} rows, the centre's buffer holds {into.capacity}")
    into.n, into.bucket = n, bucket
    for k in _SCALARS:
        getattr(into, k)[:n] = msg[k]
    into.rows[:n] += row_offset
    into.glob[:n] = msg["glob"]
    m = msg["ent"].shape[1]
    ent, types = into.ent, into.ent_type
    ent[:] = 0.0
    types[:] = 0
    ent[:, :m] = msg["ent"]
    types[:, :m] = msg["types"]
    into.mask[:n] = np.unpackbits(msg["mask"], axis=2, count=layout.HEAD_MAX)
    into.bad = []
    return into


def nbytes(msg: dict) -> int:
    """The message's array bytes (what a round costs on the wire, less framing)."""
    return sum(v.nbytes for v in msg.values() if isinstance(v, np.ndarray))
