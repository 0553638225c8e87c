"""What crosses the network for a round of a game host: its gathered rows, compact.

A host sends only the filled part of a gathered Batch: the entities up to the batch's
largest n_ent (not the padding bucket), the masks as bits, narrow integer types; the
centre unpacks it into a Batch of its own, rows moved to the run's global numbering,
entities padded back to the bucket (zero past each row's n_ent, as a gather leaves
them). Both ends are numpy: Ray moves the arrays without pickling their bytes one by one.

The messages are the dataclasses below: a host sends `Round` and `Reset` (numbered, in
order, in its outbox); the centre sends `Answer`, `Release` and `Restart` (its ops, in
order). A receiver dispatches on the type (`match`), never on a string.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from w3async.sync.gather import Batch

_SCALARS = {  # field: its dtype on the wire (the batch's own where narrowing could lose)
    "rows": np.int32, "obs_seq": np.uint64, "lane": np.uint32, "side": np.uint8, "episode": np.uint64,
    "step": np.uint32, "flags": np.uint8, "reward": np.float32, "n_ent": np.uint16, "state_hash": np.uint64,
    "discarded": np.uint32,
}


# ---- host to centre -----------------------------------------------------------------


@dataclass
class Round:
    """A host's gathered round, compact: its filled rows (host numbering), `gen` their
    generations there (an answer must name them, so it never lands on a restarted game)."""

    n: int
    bucket: int
    gen: np.ndarray
    scalars: dict[str, np.ndarray]  # _SCALARS' fields, narrowed
    glob: np.ndarray
    ent: np.ndarray  # entities up to the round's largest n_ent
    types: np.ndarray
    mask: np.ndarray  # packed bits


@dataclass
class Reset:
    """A game's rows [start, stop) on the host were reset; gen: their generations now."""

    start: int
    stop: int
    gen: np.ndarray


# ---- centre to host -----------------------------------------------------------------


@dataclass
class Answer:
    """Actions for rows (host numbering) of the rounds gathered at gen / obs_seq."""

    rows: np.ndarray
    gen: np.ndarray
    obs_seq: np.ndarray
    actions: np.ndarray
    versions: np.ndarray


@dataclass
class Release:
    """Rows let go unanswered (back-pressure): the host gathers them again."""

    rows: np.ndarray
    gen: np.ndarray


@dataclass
class Restart:
    """The centre lost the host for a while: end every game and start it again."""


def pack(b: Batch, gen: np.ndarray) -> Round:
    """The filled part of b as a Round; gen: each row's generation on the host."""
    n = b.n
    m = max(int(b.n_ent[:n].max()), 1) if n else 1
    return Round(n=n, bucket=b.bucket, gen=np.asarray(gen, np.uint32).copy(),
                 scalars={k: getattr(b, k)[:n].astype(t, copy=True) for k, t in _SCALARS.items()},
                 glob=b.glob[:n].copy(), ent=b.ent[:, :m].copy(), types=b.ent_type[:, :m].copy(),
                 mask=np.packbits(b.mask[:n], axis=2))


def unpack(msg: Round, into: Batch, row_offset: int) -> Batch:
    """Fill `into` (capacity >= msg's n) from a packed round; rows + row_offset."""
    n, bucket = int(msg.n), int(msg.bucket)
    if n > into.capacity:
        raise ValueError(f"a packed batch of {n} rows, the centre's buffer holds {into.capacity}")
    into.n, into.bucket = n, bucket
    for k in _SCALARS:
        getattr(into, k)[:n] = msg.scalars[k]
    into.rows[:n] += row_offset
    into.glob[:n] = msg.glob
    m = msg.ent.shape[1]
    ent, types = into.ent, into.ent_type
    ent[:] = 0.0
    types[:] = 0
    ent[:, :m] = msg.ent
    types[:, :m] = msg.types
    into.mask[:n] = np.unpackbits(msg.mask, axis=2, count=into.mask.shape[2])
    into.bad = []
    return into


def nbytes(msg: Round) -> int:
    """The round's array bytes (what it costs on the wire, less framing)."""
    arrays = [getattr(msg, f.name) for f in fields(msg)] + list(msg.scalars.values())
    return sum(v.nbytes for v in arrays if isinstance(v, np.ndarray))
