"""The rows as the bridge keeps them: each row's observation in two banks, its last
post's scalars (reward, flags, episode, step, obs_seq), and its state (posted, handed,
cut, in_episode: env/bridge.py says what each means; gen, the run's generation of the
row when it was held, and stamp, when it was posted).

A row's bank `bank[r]` holds the last observation handed out to the caller; a post goes
into the other bank. So the observation a cut row reports (its game ended mid-episode:
the last one handed out, env/bridge.py) is still there when the new game posts, without
copying every handed-out observation aside at each step: that copy was a fifth of
step()'s time on the caller's thread with 8 null games.

Two backends with one contract: `CRowCopies` (csrc/rowcopies.c, the default: a post and
a hand-out are one C call each) and `NumpyRowCopies` (the reference, and the fallback
when the extension is missing: 15-20 numpy calls each, whose per-call cost, not the 16
rows' bytes, was 40-60 us of a step). tests/env/test_env_rows.py proves they agree.
Every method is called with the bridge's condition held.
"""

from __future__ import annotations

import numpy as np

from w3async.env.spaces import OBS_KEYS
from w3async.sync import layout
from w3async.sync.gather import Batch

_SCALARS = ("reward", "flags", "episode", "step", "obs_seq")  # a Batch's, the same dtypes here
_STATES = ("posted", "handed", "cut", "in_episode", "slot_of", "gen", "stamp")


def time_limit(flags: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """Per row: its episode ended at the game's own time limit, the result its tie-break's
    (the row's TIME_LIMIT flag; never for a cut row)."""
    both = layout.FLAG_TIME_LIMIT | layout.FLAG_DONE
    return ((flags & both) == both) & ~cut


class NumpyRowCopies:
    """Two banks of (glob, ent, ent_type, n_ent, mask) for n rows of the run's shape, in numpy."""

    def __init__(self, n: int, slot_of: np.ndarray | None = None, lay: layout.Layout = layout.DEFAULT):
        self.n_rows = n
        self.lay = lay
        self.glob = np.zeros((2, n, lay.g_glob), np.float32)
        self.ent = np.zeros((2, n, lay.e_max, lay.f_ent), np.float32)
        self.ent_type = np.zeros((2, n, lay.e_max), np.int16)
        self.n_ent = np.zeros((2, n), np.int64)
        self.mask = np.zeros((2, n, lay.n_heads, lay.head_max), np.uint8)
        # How far each bank's entities may be non-zero: a post of a smaller bucket zeroes
        # the rest only when a larger one was written there before (a batch is zero past
        # n_ent up to its bucket; the bank past that must be too).
        self.ent_hi = np.zeros((2, n), np.int64)
        self.bank = np.zeros(n, np.int64)  # the bank of each row's last observation handed out
        self.reward = np.zeros(n, np.float32)
        self.flags = np.zeros(n, np.uint32)
        self.episode = np.zeros(n, np.uint64)
        self.step = np.zeros(n, np.uint32)
        self.obs_seq = np.zeros(n, np.uint64)
        self.posted = np.zeros(n, bool)
        self.handed = np.zeros(n, bool)
        self.cut = np.zeros(n, bool)
        self.in_episode = np.zeros(n, bool)
        self.slot_of = np.zeros(n, np.int32) if slot_of is None else np.ascontiguousarray(slot_of, np.int32)
        self.gen = np.zeros(n, np.int64)  # each row's generation when held (RunControl's ticket)
        self.stamp = np.zeros(n, np.int64)  # when the row was posted: oldest handed out first
        self._fields = tuple(getattr(self, k) for k in OBS_KEYS)

    def put(self, rows: np.ndarray, b: Batch, gens: np.ndarray, stamp: int) -> None:
        """The batch's first len(rows) rows, posted for these table rows (int64): each
        row posted, its generation gens[row] (gens: the run's, one per table row), its
        stamp."""
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
        for k in _SCALARS:
            getattr(self, k)[rows] = getattr(b, k)[:n]
        self.posted[rows] = True
        self.gen[rows] = gens[rows]
        self.stamp[rows] = stamp

    def ready(self, rows: np.ndarray | None = None) -> int:
        """How many of these rows (None: every row) can be handed out: posted or cut."""
        if rows is None:
            return int(np.count_nonzero(self.posted | self.cut))
        return int(np.count_nonzero(self.posted[rows] | self.cut[rows]))

    def take(self, rows: np.ndarray) -> tuple[dict, dict]:
        """Hand out these rows (int64; each posted or cut): their observations (a cut row:
        the last one handed out) and the step's arrays, all new arrays. A post becomes the
        last handed out (handed, no longer posted, in an episode unless it ended it); a
        cut is reported once, as a truncation with reward 0."""
        cut = self.cut[rows]
        any_cut = bool(cut.any())
        obs = self._hand_out(rows, cut if any_cut else None)
        flags = self.flags[rows]
        reward = self.reward[rows]
        reward[(flags & layout.FLAG_FIRST) != 0] = 0
        terminated = (flags & layout.FLAG_DONE) != 0
        truncated = (flags & layout.FLAG_TRUNCATED) != 0
        if any_cut:
            reward[cut] = 0
            terminated[cut] = False
            truncated[cut] = True
            real = rows[~cut]
            ended = (terminated | truncated)[~cut]
            self.cut[rows[cut]] = False
        else:
            real, ended = rows, terminated | truncated
        self.in_episode[real] = ~ended
        self.handed[real] = True
        self.posted[real] = False
        step = dict(reward=reward, terminated=terminated, truncated=truncated, cut=cut,
                    episode=self.episode[rows], step=self.step[rows], slot=self.slot_of[rows],
                    time_limit=time_limit(flags, cut))
        return obs, step

    def _hand_out(self, rows: np.ndarray, cut: np.ndarray | None) -> dict:
        """The observations: each row's post, or a cut row's (cut[i]) last one handed out."""
        src = self.bank[rows] ^ 1
        if cut is not None:
            src[cut] ^= 1
        obs = {k: a[src, rows] for k, a in zip(OBS_KEYS, self._fields)}
        self.bank[rows] = src
        return obs


class CRowCopies(NumpyRowCopies):
    """The same arrays, filled and read by csrc/rowcopies.c in one call each."""

    def __init__(self, n: int, slot_of: np.ndarray | None = None, lay: layout.Layout = layout.DEFAULT):
        super().__init__(n, slot_of, lay)
        from w3async.env import _rowcopies  # noqa: PLC0415 (the extension is optional at import time)

        self._ext = _rowcopies
        self._c: dict[int, tuple[Batch, object]] = {}  # per batch object: its C view (a gatherer's, reused)

    def _for(self, b: Batch):
        got = self._c.get(id(b))
        if got is None or got[0] is not b:
            bufs = {k: getattr(self, k) for k in (*OBS_KEYS, "ent_hi", "bank", *_SCALARS, *_STATES)}
            bufs |= {"b_" + k: getattr(b, k) for k in ("glob", "n_ent", "mask", *_SCALARS)}
            bufs |= {"b_ent": b.ent_flat, "b_ent_type": b.type_flat}
            got = self._c[id(b)] = (b, self._ext.Copies(n_rows=self.n_rows, capacity=b.capacity,
                                                                    shape=self.lay.shape, **bufs))
        return got[1]

    def put(self, rows: np.ndarray, b: Batch, gens: np.ndarray, stamp: int) -> None:
        self._for(b).put(rows, b.bucket, gens, stamp)

    def ready(self, rows: np.ndarray | None = None) -> int:
        return self._any().ready(rows)

    def take(self, rows: np.ndarray) -> tuple[dict, dict]:
        n = len(rows)
        lay = self.lay
        obs = {"glob": np.empty((n, lay.g_glob), np.float32),
               "ent": np.empty((n, lay.e_max, lay.f_ent), np.float32),
               "ent_type": np.empty((n, lay.e_max), np.int16),
               "n_ent": np.empty(n, np.int64),
               "mask": np.empty((n, lay.n_heads, lay.head_max), np.uint8)}
        step = {"reward": np.empty(n, np.float32), "terminated": np.empty(n, bool), "truncated": np.empty(n, bool),
                "cut": np.empty(n, bool), "episode": np.empty(n, np.uint64), "step": np.empty(n, np.uint32),
                "slot": np.empty(n, np.int32)}
        flags = self.flags[rows]  # the posts' flags, as take() finds them
        self._any().take(rows, *obs.values(), *step.values())
        step["time_limit"] = time_limit(flags, step["cut"])
        return obs, step

    def _any(self):
        """A C view (each one's row state and banks are these arrays); before any post (a
        hand-out of cut rows only), one over a batch of its own."""
        return next(iter(self._c.values()))[1] if self._c else self._for(Batch(1, self.lay))


def extension_problem() -> str | None:
    """Why csrc/rowcopies.c cannot run here (not built, or built against another
    shim/w3s_table.h), or None. Ends with the fix."""
    try:
        from w3async.env import _rowcopies  # noqa: PLC0415
    except ImportError as e:
        return f"the C extension w3async.env._rowcopies cannot be imported ({e}): run `make setup`"
    if _rowcopies.layout_hash(*layout.DEFAULT.shape) != layout.LAYOUT_HASH:
        return "w3async.env._rowcopies was built against another shim/w3s_table.h: run `make setup`"
    return None


def row_copies(n: int, slot_of: np.ndarray | None = None, lay: layout.Layout = layout.DEFAULT) -> NumpyRowCopies:
    """The C backend when it is built for this layout, else numpy (the same results);
    slot_of: each row's game slot (the step's `slot`); lay: the run's row shape."""
    return (CRowCopies if extension_problem() is None else NumpyRowCopies)(n, slot_of, lay)
