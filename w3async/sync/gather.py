"""A round's work on the shared table: find the waiting rows, check them, gather the
valid ones into one padded batch, write the answers and ring the doorbells.

Two backends with one contract: `CGatherer` (csrc/rows.c, the default) and
`NumpyGatherer` (the reference, and the fallback when the extension is missing).
tests/sync/test_gather.py proves they give identical batches, bad-row reports and answers;
bench/step_sync.py --gather measures both on the same work.

The game is untrusted and runs while we read: both backends read each waiting row
once into memory the supervisor owns (the batch, a numpy copy), check that copy and
use only it, and decide whether a row waits by `acked`, the supervisor's own record of
the act_seq it published (a game that rewrites its act_seq only confuses itself).

The checks, in the order both backends apply them (the first failure is reported):
obs_seq == act_seq + 1, row_magic, n_ent <= e_max, known flags, a finite reward,
finite global features, finite entity features (the first n_ent entities), entity
type ids in [0, n_types), mask bytes 0 or 1 with at least one allowed choice a head.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from w3async.sync import layout
from w3async.sync.table import Table

# Entity counts are padded up to one of these, so a network sees a few shapes only
# (CUDA graphs are captured per bucket); a run's are its layout's (Layout.buckets).
BUCKETS = layout.BUCKETS
_ROW_FIELDS = ("rows", "obs_seq", "lane", "side", "episode", "step", "flags", "reward", "n_ent",
               "state_hash", "discarded", "glob", "mask")  # a Batch's per-row arrays, entities aside


class BadRow(NamedTuple):
    """A row that failed a check: its table index, the field, the flat index within the
    field (-1 for a scalar) and the value found."""

    row: int
    field: str
    index: int
    value: int | float


@dataclass
class Batch:
    """The rows of one round, in preallocated buffers of capacity n_rows, shaped by the
    run's layout. Only the first `n` rows are valid; entity blocks are (n, bucket, ...)
    views over flat buffers."""

    capacity: int
    lay: layout.Layout = layout.DEFAULT
    n: int = 0
    bucket: int = BUCKETS[0]
    rows: np.ndarray = field(init=False)
    obs_seq: np.ndarray = field(init=False)
    lane: np.ndarray = field(init=False)
    side: np.ndarray = field(init=False)
    episode: np.ndarray = field(init=False)
    step: np.ndarray = field(init=False)
    flags: np.ndarray = field(init=False)
    reward: np.ndarray = field(init=False)
    n_ent: np.ndarray = field(init=False)
    state_hash: np.ndarray = field(init=False)
    discarded: np.ndarray = field(init=False)
    glob: np.ndarray = field(init=False)
    ent_flat: np.ndarray = field(init=False)
    type_flat: np.ndarray = field(init=False)
    mask: np.ndarray = field(init=False)
    bad: list[BadRow] = field(default_factory=list)

    def __post_init__(self) -> None:
        c = self.capacity
        self.rows = np.zeros(c, np.int32)
        self.obs_seq = np.zeros(c, np.uint64)
        self.lane = np.zeros(c, np.uint32)
        self.side = np.zeros(c, np.uint32)
        self.episode = np.zeros(c, np.uint64)
        self.step = np.zeros(c, np.uint32)
        self.flags = np.zeros(c, np.uint32)
        self.reward = np.zeros(c, np.float32)
        self.n_ent = np.zeros(c, np.uint32)
        self.state_hash = np.zeros(c, np.uint64)
        self.discarded = np.zeros(c, np.uint32)
        lay = self.lay
        self.bucket = lay.buckets[0]
        self.glob = np.zeros((c, lay.g_glob), np.float32)
        self.ent_flat = np.zeros(c * lay.e_max * lay.f_ent, np.float32)
        self.type_flat = np.zeros(c * lay.e_max, np.int16)
        self.mask = np.zeros((c, lay.n_heads, lay.head_max), np.uint8)

    def copy_to(self, out: Batch) -> None:
        """Copy the first n rows into another batch of the same capacity (its bucket too)."""
        n = out.n = self.n
        out.bucket = self.bucket
        for name in _ROW_FIELDS:
            getattr(out, name)[:n] = getattr(self, name)[:n]
        f = self.lay.f_ent
        out.ent_flat[: n * self.bucket * f] = self.ent_flat[: n * self.bucket * f]
        out.type_flat[: n * self.bucket] = self.type_flat[: n * self.bucket]

    def select(self, keep: np.ndarray) -> None:
        """Keep only the rows where keep (n,) is True, in order, in place (the bucket
        stays: padding past each row's n_ent is still zero)."""
        idx = np.flatnonzero(np.asarray(keep[: self.n], bool))
        k = len(idx)
        ent, types = self.ent, self.ent_type
        for name in _ROW_FIELDS:
            a = getattr(self, name)
            a[:k] = a[idx]
        ent[:k] = ent[idx]
        types[:k] = types[idx]
        self.n = k

    @property
    def ent(self) -> np.ndarray:
        """(n, bucket, f_ent) entity features, zero past each row's n_ent."""
        f = self.lay.f_ent
        return self.ent_flat[: self.n * self.bucket * f].reshape(self.n, self.bucket, f)

    @property
    def ent_type(self) -> np.ndarray:
        """(n, bucket) entity type ids, zero past each row's n_ent."""
        return self.type_flat[: self.n * self.bucket].reshape(self.n, self.bucket)


class Doorbell(NamedTuple):
    """A game's act doorbell as the answer path sees it: the fd and how many bytes ring it."""

    fd: int
    nbytes: int  # 8 for an eventfd, 1 for a FIFO


class _GathererBase:
    """What both backends share: the table, the row->game map, the doorbells, the batch."""

    def __init__(self, table: Table, n_games: int, n_types: int, buckets: tuple[int, ...] | None = None):
        lay = self.lay = table.layout
        buckets = lay.buckets if buckets is None else tuple(buckets)
        if not buckets or list(buckets) != sorted(set(buckets)) or buckets[-1] != lay.e_max:
            raise ValueError(f"buckets {buckets} must ascend and end at the row's entity count, {lay.e_max}")
        if not 1 <= n_types <= 32767:
            raise ValueError(f"n_types={n_types} must be in 1..32767")
        self.table = table
        self.n_types = n_types
        self.buckets = np.asarray(buckets, np.int32)
        self.row_game = np.full(table.n_rows, -1, np.int32)
        self.acked = np.zeros(table.n_rows, np.uint64)  # the act_seq we last published, per row
        self.act_fd = np.full(max(n_games, 1), -1, np.int32)
        self.act_len = np.full(max(n_games, 1), 8, np.int32)
        self.batch = Batch(table.n_rows, lay)

    def attach_game(self, game: int, rows: slice, bell: Doorbell) -> None:
        """Route rows to game `game` and its act doorbell (its segment is fresh: nothing
        posted, nothing answered)."""
        self.acked[rows] = 0
        self.row_game[rows] = game
        self.act_fd[game] = bell.fd
        self.act_len[game] = bell.nbytes

    def detach_game(self, game: int) -> None:
        """Stop gathering this game's rows (it exited or is being restarted)."""
        self.row_game[(self.row_game == game) | (self.row_game == -2 - game)] = -1
        self.act_fd[game] = -1

    def hold(self, rows: np.ndarray) -> None:
        """Leave these rows out of gathers and answers (their round is computing, or the
        learner's queue is full) until release(). Encoded as -2 - game in row_game, so
        the C path needs no second map."""
        rows = np.asarray(rows, np.int64)
        g = self.row_game[rows]
        self.row_game[rows] = np.minimum(g, -2 - g)  # a game's row held; detached (-1) and held ones kept

    def release(self, rows: np.ndarray) -> None:
        """Undo hold() for these rows (rows detached meanwhile stay detached)."""
        rows = np.asarray(rows, np.int64)
        g = self.row_game[rows]
        self.row_game[rows] = np.maximum(g, -2 - g)  # a held row its game's again; the others kept


class NumpyGatherer(_GathererBase):
    """The reference path: vectorised numpy over strided column views."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        t = self.table.rows
        self._obs, self._act = t["obs_seq"], t["act_seq"]  # _act is written, never read
        self._rungs = {8: (1).to_bytes(8, "little"), 1: b"\x01"}

    def gather(self, hold: bool = False) -> Batch:
        """The valid waiting rows into the batch (bad ones in b.bad); hold: each one held
        as gathered (hold()), in the same call."""
        b = self.batch
        t = self.table.rows
        obs_all = self._obs.copy()  # one read of every sequence number
        waiting = np.flatnonzero((obs_all != self.acked) & (self.row_game >= 0))
        obs = obs_all[waiting]
        sub = t[waiting]  # one copy of each waiting row: checks and gathers read this
        sub["act_seq"] = self.acked[waiting]  # decide by what we published, not by the game's copy
        scalars_ok = self._scalars_valid(sub, obs)
        ok = scalars_ok & self._body_valid(sub)
        b.bad = [self._why(int(waiting[i]), sub[i], int(obs[i])) for i in np.flatnonzero(~ok)]
        # The bucket fits the rows whose scalars passed (the C path's first pass).
        max_ent = int(sub["n_ent"][scalars_ok].max()) if scalars_ok.any() else 0
        good = np.flatnonzero(ok)
        sub = sub[good]
        n = b.n = len(good)
        b.rows[:n] = waiting[good]
        b.obs_seq[:n] = obs[good]
        for name in ("lane", "side", "episode", "step", "flags", "reward", "n_ent", "state_hash", "discarded"):
            getattr(b, name)[:n] = sub[name]
        b.glob[:n] = sub["glob"]
        bucket = b.bucket = int(self.buckets[np.searchsorted(self.buckets, max_ent)])
        live = np.arange(bucket)[None, :] < sub["n_ent"][:, None].astype(np.int64)
        b.ent[:] = np.where(live[:, :, None], sub["ent"][:, :bucket], 0)
        b.ent_type[:] = np.where(live, sub["ent_type"][:, :bucket], 0)
        b.mask[:n] = sub["mask"]
        if hold:
            self.hold(b.rows[:n])
        return b

    def _scalars_valid(self, sub: np.ndarray, obs: np.ndarray) -> np.ndarray:
        ok = (obs == sub["act_seq"] + 1) & (sub["row_magic"] == layout.ROW_MAGIC)
        ok &= sub["n_ent"] <= self.lay.e_max
        ok &= (sub["flags"] & ~np.uint32(layout.FLAGS_KNOWN)) == 0
        ok &= np.isfinite(sub["reward"])
        return ok

    def _body_valid(self, sub: np.ndarray) -> np.ndarray:
        n_ent = np.minimum(sub["n_ent"], self.lay.e_max).astype(np.int64)
        ok = np.isfinite(sub["glob"]).all(axis=1)
        live = np.arange(self.lay.e_max)[None, :] < n_ent[:, None]
        ok &= (np.isfinite(sub["ent"]).all(axis=2) | ~live).all(axis=1)
        types = sub["ent_type"]
        ok &= (((types >= 0) & (types < self.n_types)) | ~live).all(axis=1)
        m = sub["mask"]
        ok &= (m <= 1).all(axis=(1, 2)) & (m.max(axis=2) > 0).all(axis=1)
        return ok

    def _why(self, row: int, r: np.void, obs: int) -> BadRow:
        """The first failed check of a bad row, in the contract's order."""
        if obs != int(r["act_seq"]) + 1:
            return BadRow(row, "obs_seq", -1, obs)
        if r["row_magic"] != layout.ROW_MAGIC:
            return BadRow(row, "row_magic", -1, int(r["row_magic"]))
        n_ent = int(r["n_ent"])
        if n_ent > self.lay.e_max:
            return BadRow(row, "n_ent", -1, n_ent)
        if int(r["flags"]) & ~layout.FLAGS_KNOWN:
            return BadRow(row, "flags", -1, int(r["flags"]))
        if not np.isfinite(r["reward"]):
            return BadRow(row, "reward", -1, float(r["reward"]))
        for name, flat in (("glob", r["glob"].ravel()), ("ent", r["ent"][:n_ent].ravel())):
            idx = np.flatnonzero(~np.isfinite(flat))
            if idx.size:
                return BadRow(row, name, int(idx[0]), float(flat[idx[0]]))
        types = r["ent_type"][:n_ent]
        idx = np.flatnonzero((types < 0) | (types >= self.n_types))
        if idx.size:
            return BadRow(row, "ent_type", int(idx[0]), int(types[idx[0]]))
        for h in range(self.lay.n_heads):
            m = r["mask"][h]
            idx = np.flatnonzero(m > 1)
            if idx.size:
                return BadRow(row, "mask", h * self.lay.head_max + int(idx[0]), int(m[idx[0]]))
            if not m.any():
                return BadRow(row, "mask", h * self.lay.head_max, 0)
        raise AssertionError(f"row {row} failed a vectorised check but none of the row checks")

    def answer(self, rows: np.ndarray, obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray,
               release: bool = False) -> int:
        """Write actions (n, n_heads) and versions (n,) into table rows `rows`, publish
        act_seq = obs_seq (the sequence gathered), ring each answered game once.
        release: the held ones of `rows` are released first (a round's held rows answered
        in one call). Returns the games rung."""
        rows = np.asarray(rows, np.int64)
        if release:
            self.release(rows)
        n = len(rows)
        seq = np.asarray(obs_seq[:n], np.uint64)
        # Stale answers (the game restarted meanwhile, or the row is held or gameless) drop.
        fresh = (self.row_game[rows] >= 0) & (self.acked[rows] + np.uint64(1) == seq) & (self._obs[rows] == seq)
        rows, seq = rows[fresh], seq[fresh]
        self.acked[rows] = seq
        t = self.table.rows
        t["action"][rows, : self.lay.n_heads] = np.asarray(actions[:n])[fresh]
        t["policy_version"][rows] = np.asarray(versions[:n])[fresh]
        # act_seq last: on x86 these stores become visible in program order.
        self._act[rows] = seq
        games = np.unique(self.row_game[rows])
        rung = 0
        for g in games[games >= 0]:
            fd = int(self.act_fd[g])
            if fd < 0:
                continue
            try:
                os.write(fd, self._rungs[int(self.act_len[g])])
            except BlockingIOError:
                pass  # a full FIFO: the game has a wake-up pending anyway
            rung += 1
        return rung


def c_extension_problem() -> str | None:
    """Why the C gatherer cannot run here (w3async.sync._rows, csrc/rows.c: not built, or
    built against another shim/w3s_table.h), or None. Ends with the fix."""
    try:
        from w3async.sync import _rows  # noqa: PLC0415 (the extension is optional at import time)
    except ImportError as e:
        return (f"the C extension w3async.sync._rows cannot be imported ({e}): run `make setup`, "
                f"or set supervisor.gather = 'numpy'")
    if _rows.VERSION != layout.VERSION or _rows.layout_hash(*layout.DEFAULT.shape) != layout.LAYOUT_HASH:
        return (f"w3async.sync._rows was built for layout version {_rows.VERSION} (the default row's hash "
                f"{_rows.layout_hash(*layout.DEFAULT.shape):#x}), w3async.sync.layout has {layout.VERSION} "
                f"({layout.LAYOUT_HASH:#x}): run `make setup`")
    return None


class CGatherer(_GathererBase):
    """csrc/rows.c: the same contract in one C call per gather and per answer."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        from w3async.sync import _rows  # noqa: PLC0415 (the extension is optional at import time)

        if _rows.VERSION != layout.VERSION or _rows.layout_hash(*self.lay.shape) != self.lay.hash:
            raise ImportError("w3async.sync._rows was built against another shim/w3s_table.h: rebuild it (make setup)")
        b = self.batch
        self._g = _rows.Gatherer(  # keywords only (csrc/rows.c's g_specs names each buffer)
            n_rows=self.table.n_rows, n_types=self.n_types, shape=self.lay.shape, table=self.table.rows_buffer, row_game=self.row_game,
            acked=self.acked, act_fd=self.act_fd, act_len=self.act_len, buckets=self.buckets,
            rows=b.rows, obs_seq=b.obs_seq, lane=b.lane, side=b.side, episode=b.episode, step=b.step,
            flags=b.flags, reward=b.reward, n_ent=b.n_ent, state_hash=b.state_hash, discarded=b.discarded,
            glob=b.glob, ent=b.ent_flat, ent_type=b.type_flat, mask=b.mask,
        )

    def gather(self, hold: bool = False) -> Batch:
        b = self.batch
        b.n, b.bucket, bad = self._g.gather(hold)
        b.bad = [BadRow(*x) for x in bad]
        return b

    def answer(self, rows: np.ndarray, obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray,
               release: bool = False) -> int:
        n = len(rows)
        return self._g.answer(
            np.ascontiguousarray(rows, np.int32),
            np.ascontiguousarray(obs_seq[:n], np.uint64),
            np.ascontiguousarray(np.asarray(actions)[:n, : self.lay.n_heads], np.int32),
            np.ascontiguousarray(versions[:n], np.uint32),
            release,
        )


def make_gatherer(table: Table, n_games: int, n_types: int, backend: str = "c") -> CGatherer | NumpyGatherer:
    """The recipe's backend ('c' or 'numpy')."""
    if backend == "c":
        return CGatherer(table, n_games, n_types)
    if backend == "numpy":
        return NumpyGatherer(table, n_games, n_types)
    raise ValueError(f"gather backend {backend!r} is not one of 'c', 'numpy'")
