"""Trajectories: answered rows -> fixed-length sequences per agent side -> bounded queue.

The supervisor calls, for the rows the current policy answers (train rows):

    traj.record_obs(batch, train)    # when it submits a round (the Batch is reused after)
    traj.record_answer(result)       # when the round's RoundResult is back
    traj.cut(rows)                   # when a game restarts (its rows' partial data go)
    if traj.full: ...                # back-pressure: hold the train rows until not full

and the learner's thread calls `traj.get(timeout_s)` for the next TrajBatch.

How a table row's stream becomes steps. A row's reward is for the PREVIOUS action
(layout: "reward for the previous action"), so step t = (observation, action, logp,
value, version) from one row, completed by the NEXT row of the same table row: its
reward, its DONE/TRUNCATED flags and its value (the next observation's value, which GAE
bootstraps from on a truncation). A row flagged DONE or TRUNCATED is the episode's last
observation: it completes the step before it and is not itself a step (its answer is
ignored by the game). A FIRST row starts a new episode inside the same sequence;
sequences run across episode ends like CleanRL's rollouts, with `first` marking
where a GRU's state restarts.

Restarts (`cut`, or a FIRST row arriving while a step still waits for its reward):
the row's partial sequence is DROPPED, all of it. The step waiting for its reward has
no reward and no next observation, so it cannot be completed; marking an earlier step
truncated would be sound but would make sequences of varying length for a rare event.
Dropped steps are counted (stats.cut_steps). A cut never produces a done or truncated
flag, so nothing is trained on as if an episode had ended.

The queue holds `queue_batches` ready batches (one by default: in a Warcraft III harness under Wine a bounded
queue kept the batches ~1.3 updates old instead of 3 and growing). When it holds that
many, `full` turns True: the supervisor should then stop answering train rows until the
learner takes a batch, so the next batch is collected by the policy the learner just
published. Rows already in flight still complete steps; a batch they finish waits as
`pending` (one at most), and sequences finished beyond it are dropped and counted
(stats.dropped_seqs). The time spent full (stats.backpressure_s), the learner's wait for
data (stats.wait_s) and each batch's policy versions (for staleness at update time) are
measured.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from w3async.sync import layout
from w3async.sync.gather import Batch
from w3async.recipes.learning import TrajConfig  # the recipe's [trajectories] section

_IDLE, _STEP, _TERMINAL = 0, 1, 2  # what a row's next answer completes


@dataclass
class TrajBatch:
    """B sequences of T steps (arrays (B, T, ...)); entities cropped to `bucket`."""

    glob: np.ndarray  # (B, T, G_GLOB) float32
    ent: np.ndarray  # (B, T, bucket, F_ENT) float32, zero past n_ent
    ent_type: np.ndarray  # (B, T, bucket) int16
    n_ent: np.ndarray  # (B, T) int32
    mask: np.ndarray  # (B, T, N_HEADS, HEAD_MAX) uint8
    action: np.ndarray  # (B, T, N_HEADS) int32
    logp: np.ndarray  # (B, T) float32 at collection
    value: np.ndarray  # (B, T) float32 at collection
    next_value: np.ndarray  # (B, T) float32 the next observation's value
    reward: np.ndarray  # (B, T) float32 for this step's action
    done: np.ndarray  # (B, T) bool: the episode ended after this step
    truncated: np.ndarray  # (B, T) bool: the episode was cut after this step (bootstrap)
    first: np.ndarray  # (B, T) bool: this step starts an episode (GRU reset)
    version: np.ndarray  # (B, T) uint32 the policy version that acted
    rows: np.ndarray  # (B,) int32 the table row of each sequence
    state0: np.ndarray | None  # (B, d) the GRU state before each sequence, None without GRU
    bucket: int
    made_at: float = field(default_factory=time.monotonic)

    @property
    def shape(self) -> tuple[int, int]:
        return self.reward.shape


@dataclass
class TrajStats:
    batches: int = 0
    steps: int = 0  # steps put into batches
    cut_steps: int = 0  # steps dropped by restarts / row reassignment
    dropped_seqs: int = 0  # sequences finished while a batch was already pending
    backpressure_s: float = 0.0  # time spent `full`
    wait_s: float = 0.0  # the learner's time in get() waiting for a batch


class Trajectories:
    """See the module docstring. record_* and cut are called from one thread (the
    supervisor's); get() from the learner's."""

    def __init__(self, n_table_rows: int, cfg: TrajConfig = TrajConfig(), state_dim: int | None = None,
                 lay: layout.Layout = layout.DEFAULT):
        self.cfg = cfg
        self.lay = lay
        n, s = n_table_rows, cfg.seq_len + 1  # one position more: the next sequence's first step
        self.stats = TrajStats()
        # per table row, per position in the sequence
        self._glob = np.zeros((n, s, lay.g_glob), np.float32)
        self._ent = np.zeros((n, s, lay.e_max, lay.f_ent), np.float32)
        self._type = np.zeros((n, s, lay.e_max), np.int16)
        self._n_ent = np.zeros((n, s), np.int32)
        self._mask = np.zeros((n, s, lay.n_heads, lay.head_max), np.uint8)
        self._action = np.zeros((n, s, lay.n_heads), np.int32)
        self._logp = np.zeros((n, s), np.float32)
        self._value = np.zeros((n, s), np.float32)
        self._next_value = np.zeros((n, s), np.float32)
        self._reward = np.zeros((n, s), np.float32)
        self._done = np.zeros((n, s), bool)
        self._trunc = np.zeros((n, s), bool)
        self._first = np.zeros((n, s), bool)
        self._version = np.zeros((n, s), np.uint32)
        self._state = np.zeros((n, s, state_dim), np.float32) if state_dim else None
        # per table row
        self._n_steps = np.zeros(n, np.int64)  # steps in positions (the last may still be open)
        self._open = np.zeros(n, bool)  # the last step waits for its reward (the next row)
        self._need_nv = np.zeros(n, bool)  # the step before the row in flight waits for its value
        self._phase = np.zeros(n, np.int8)  # what the answer in flight completes
        self._build = self._new_build()
        self._k = 0  # sequences in the batch being built
        self._ready: list[TrajBatch] = []
        self._pending: TrajBatch | None = None
        self._full_since: float | None = None
        self._cv = threading.Condition()

    # -- the supervisor's side -----------------------------------------------------------

    def record_obs(self, batch: Batch, train: np.ndarray | None = None) -> None:
        """Take this round's train rows (train (n,) bool, default all) from the batch."""
        n = batch.n
        sel = np.arange(n) if train is None else np.flatnonzero(np.asarray(train[:n], bool))
        if train is not None:  # a row that stopped being trained (e.g. now plays a snapshot)
            off = batch.rows[:n][~np.asarray(train[:n], bool)]
            self.cut(off[(self._n_steps[off] > 0) | (self._phase[off] != _IDLE)])
        rows = batch.rows[sel].astype(np.int64)
        busy = rows[self._phase[rows] != _IDLE]
        if busy.size:
            raise RuntimeError(f"rows {busy[:8].tolist()} recorded again before their answer: call record_answer() first")
        flags = batch.flags[sel]
        first = (flags & layout.FLAG_FIRST) != 0
        done = (flags & layout.FLAG_DONE) != 0
        trunc = (flags & layout.FLAG_TRUNCATED) != 0
        # A new episode while a step waits for its reward: the old one ended unseen.
        self.cut(rows[first & self._open[rows]])
        # The next row completes the open step: reward, done, truncated (value on answer).
        closes = self._open[rows] & ~first
        r, last = rows[closes], self._n_steps[rows[closes]] - 1
        self._reward[r, last] = batch.reward[sel][closes]
        self._done[r, last] = done[closes]
        self._trunc[r, last] = trunc[closes] & ~done[closes]
        self._open[r] = False
        self._need_nv[r] = True
        # An episode's last observation is not a step: its answer only gives the value.
        term = done | trunc
        self._phase[rows[term]] = _TERMINAL
        new = ~term
        r, i = rows[new], sel[new]
        pos = self._n_steps[r]
        bucket = batch.bucket
        self._glob[r, pos] = batch.glob[i]
        self._ent[r, pos, :bucket] = batch.ent[i]
        self._ent[r, pos, bucket:] = 0.0  # the position may hold a longer earlier step
        self._type[r, pos, :bucket] = batch.ent_type[i]
        self._type[r, pos, bucket:] = 0
        self._n_ent[r, pos] = batch.n_ent[i]
        self._mask[r, pos] = batch.mask[i]
        self._first[r, pos] = first[new]
        self._n_steps[r] += 1
        self._phase[r] = _STEP

    def record_answer(self, result) -> bool:
        """Take a round's answers (a RoundResult) for the rows record_obs() took. Returns
        `full`: True when the queue is full and the train rows should wait (back-pressure)."""
        rows = np.asarray(result.rows, np.int64)
        phase = self._phase[rows]
        tracked = phase != _IDLE
        rows, phase = rows[tracked], phase[tracked]
        value = np.asarray(result.value)[tracked]
        # The value of this row is the next value of the step before it.
        nv = self._need_nv[rows]
        r = rows[nv]
        self._next_value[r, self._n_steps[r] - 1 - (phase[nv] == _STEP)] = value[nv]
        self._need_nv[r] = False
        step = phase == _STEP
        r, last = rows[step], self._n_steps[rows[step]] - 1
        self._action[r, last] = np.asarray(result.actions)[tracked][step]
        self._logp[r, last] = np.asarray(result.logp)[tracked][step]
        self._value[r, last] = value[step]
        self._version[r, last] = np.asarray(result.versions)[tracked][step]
        if self._state is not None and result.state_in is not None:
            self._state[r, last] = np.asarray(result.state_in)[tracked][step]
        self._open[r] = True
        self._phase[rows] = _IDLE
        complete = self._n_steps[rows] - self._open[rows]
        for row in rows[complete >= self.cfg.seq_len]:
            self._emit(int(row))
        return self.full

    def cut(self, rows: np.ndarray) -> None:
        """Drop these rows' partial sequences (a game restarted, or the row now plays
        for another network). An answer still in flight for them is ignored."""
        rows = np.asarray(rows, np.int64)
        if rows.size == 0:
            return
        self.stats.cut_steps += int(self._n_steps[rows].sum())
        self._n_steps[rows] = 0
        self._open[rows] = False
        self._need_nv[rows] = False
        self._phase[rows] = _IDLE

    @property
    def full(self) -> bool:
        """True while the queue holds queue_batches finished batches: hold the train rows
        until the learner takes one (then the next batch is collected by the newest
        policy, and a batch is about one update old when the learner trains on it)."""
        return self._full_since is not None

    # -- sequences and batches -----------------------------------------------------------

    # the per-step arrays a sequence is made of, per table row and position
    _STEP_FIELDS = ("_glob", "_ent", "_type", "_n_ent", "_mask", "_action", "_logp", "_value", "_next_value",
                    "_reward", "_done", "_trunc", "_first", "_version")

    def _new_build(self) -> dict[str, np.ndarray]:
        b, t = self.cfg.seqs_per_batch, self.cfg.seq_len
        build = {k: np.zeros((b, t) + getattr(self, k).shape[2:], getattr(self, k).dtype) for k in self._STEP_FIELDS}
        build["_rows"] = np.zeros(b, np.int32)
        if self._state is not None:
            build["_state0"] = np.zeros((b, self._state.shape[2]), np.float32)
        return build

    def _emit(self, row: int) -> None:
        """Move the row's first seq_len steps into the batch being built."""
        t = self.cfg.seq_len
        if self._k == self.cfg.seqs_per_batch:  # built but not yet finished: a batch was pending
            self._flush()
        if self._k < self.cfg.seqs_per_batch:
            k = self._k
            for name in self._STEP_FIELDS:
                self._build[name][k] = getattr(self, name)[row, :t]
            self._build["_rows"][k] = row
            if self._state is not None:
                self._build["_state0"][k] = self._state[row, 0]
            self._k += 1
            if self._k == self.cfg.seqs_per_batch:
                self._flush()
        else:
            self.stats.dropped_seqs += 1
        # The step after the sequence (recorded, maybe still open) becomes position 0.
        rest = int(self._n_steps[row]) - t
        if rest > 0:
            for name in self._STEP_FIELDS + (("_state",) if self._state is not None else ()):
                arr = getattr(self, name)
                arr[row, :rest] = arr[row, t : t + rest]
        self._n_steps[row] = rest

    def _flush(self) -> None:
        """Finish the full batch being built, unless a finished one already waits."""
        if self._pending is None:
            self._finish()

    def _finish(self) -> None:
        b = self._build
        bucket = next(x for x in self.lay.buckets if x >= int(b["_n_ent"].max()))
        tb = TrajBatch(
            glob=b["_glob"], ent=np.ascontiguousarray(b["_ent"][:, :, :bucket]),
            ent_type=np.ascontiguousarray(b["_type"][:, :, :bucket]), n_ent=b["_n_ent"], mask=b["_mask"],
            action=b["_action"], logp=b["_logp"], value=b["_value"], next_value=b["_next_value"],
            reward=b["_reward"], done=b["_done"], truncated=b["_trunc"], first=b["_first"], version=b["_version"],
            rows=b["_rows"], state0=b.get("_state0"), bucket=bucket,
        )
        self.stats.batches += 1
        self.stats.steps += tb.reward.size
        self._build = self._new_build()
        self._k = 0
        with self._cv:
            if len(self._ready) < self.cfg.queue_batches:
                self._ready.append(tb)
                self._cv.notify()
            else:  # finished by rows that were in flight when the queue filled up
                self._pending = tb  # _flush() made sure nothing was pending
            if len(self._ready) >= self.cfg.queue_batches and self._full_since is None:
                self._full_since = time.monotonic()

    # -- the learner's side --------------------------------------------------------------

    def get(self, timeout_s: float | None = None) -> TrajBatch | None:
        """The oldest ready batch, waiting up to timeout_s (None: forever); None on timeout."""
        t0 = time.monotonic()
        with self._cv:
            if not self._ready:
                self._cv.wait_for(lambda: bool(self._ready), timeout_s)
            self.stats.wait_s += time.monotonic() - t0
            if not self._ready:
                return None
            tb = self._ready.pop(0)
            if self._pending is not None:  # room again: the pending batch goes in
                self._ready.append(self._pending)
                self._pending = None
            if len(self._ready) < self.cfg.queue_batches and self._full_since is not None:
                self.stats.backpressure_s += time.monotonic() - self._full_since  # rows may go on
                self._full_since = None
            return tb
