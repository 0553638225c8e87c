"""w3async.env's own copies of the rows (env/rowcopies.py): what a cut row reports, that
the arrays handed to the caller are the caller's, and the C and numpy copies agreeing."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import w3async.env as we
from w3async.env.rowcopies import CRowCopies, NumpyRowCopies, extension_problem
from w3async.env.spaces import OBS_KEYS, sample_masked
from w3async.sync import layout
from w3async.sync.gather import Batch

from tests.env.test_env import _reset_and_step


@pytest.fixture(autouse=True)
def _built(null_native):
    return null_native


def test_a_cut_row_reports_the_last_observation_handed_out():
    """A game killed mid-episode: its rows' truncation carries the observation the step
    before handed out (the null game's glob moves with the step, the restarted game's
    first one is another), even though the caller scribbled over every array it got and
    the new game posted meanwhile."""
    env = we.make("env-null", sets=['games.env.W3N_EPISODE_STEPS="100000"'])
    try:
        obs, rng = _reset_and_step(env, 12, 5)
        slot = env.run.thread.sup.slots[1]
        mine = np.arange(slot.row0, slot.row0 + slot.nrows)
        os.kill(slot.proc.pid, signal.SIGKILL)
        cut_seen = np.zeros(env.num_envs, bool)
        for _ in range(200):
            before = {k: v.copy() for k, v in obs.items()}
            actions = sample_masked(obs["mask"], rng)
            for v in obs.values():
                v[...] = 7  # the caller's arrays: nothing the env keeps
            obs, rew, term, trunc, infos = env.step(actions)
            cut = infos["cut"]
            for k in OBS_KEYS:
                assert np.array_equal(obs[k][cut], before[k][cut]), k
            assert not np.array_equal(obs["glob"][~cut], before["glob"][~cut])
            cut_seen |= cut
            if cut_seen[mine].all():
                break
        assert cut_seen[mine].all() and not cut_seen[np.setdiff1d(np.arange(env.num_envs), mine)].any()
        obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
        assert (infos["step"][mine] == 0).all() and not infos["cut"].any()
    finally:
        env.close()


def _batch(rng, rows, bucket, lay: layout.Layout = layout.DEFAULT) -> Batch:
    """A gathered batch of these rows: random values, entities zero past n_ent."""
    b = Batch(16, lay)
    n = b.n = len(rows)
    b.bucket = bucket
    b.rows[:n] = rows
    b.glob[:n] = rng.standard_normal((n, lay.g_glob))
    b.n_ent[:n] = rng.integers(0, bucket + 1, n)
    live = np.arange(bucket)[None, :] < b.n_ent[:n, None]
    b.ent[:] = np.where(live[:, :, None], rng.standard_normal((n, bucket, lay.f_ent)), 0)
    b.ent_type[:] = np.where(live, rng.integers(1, 9, (n, bucket)), 0)
    b.mask[:n] = rng.integers(0, 2, (n, lay.n_heads, lay.head_max))
    b.reward[:n] = rng.standard_normal(n)
    b.flags[:n] = rng.integers(0, 8, n)
    b.episode[:n] = rng.integers(0, 1 << 40, n)
    b.step[:n] = rng.integers(0, 1000, n)
    b.obs_seq[:n] = rng.integers(1, 1 << 40, n)
    return b


@pytest.mark.skipif(extension_problem() is not None, reason=str(extension_problem()))
@pytest.mark.parametrize("shape", [layout.DEFAULT.shape, (7, 5, 3, 8, 200), (0, 0, 8, 1, 3), (40, 3, 0, 2, 9)])
def test_c_and_numpy_copies_agree(shape):
    """csrc/rowcopies.c against the numpy reference, on rows of each shape: 300 rounds of
    posts of random rows and buckets (a smaller bucket after a larger one must leave
    zeros), then hand-outs of random rows, some cut, with random flags; the same arrays
    handed out, the same banks and row states kept."""
    lay = layout.Layout(*shape)
    rng = np.random.default_rng(6)
    slot_of = np.repeat(np.arange(8, dtype=np.int32), 2)
    c, ref = CRowCopies(16, slot_of, lay), NumpyRowCopies(16, slot_of, lay)
    for _ in range(300):
        rows = rng.choice(16, rng.integers(1, 17), replace=False).astype(np.int64)
        b = _batch(rng, rows, int(rng.choice(lay.buckets)), lay)
        gens, stamp = rng.integers(0, 9, 16), int(rng.integers(1, 1 << 40))
        c.put(rows, b, gens, stamp)
        ref.put(rows, b, gens, stamp)
        assert c.posted[rows].all() and (c.gen[rows] == gens[rows]).all() and (c.stamp[rows] == stamp).all()
        some = rng.choice(16, rng.integers(1, 17), replace=False).astype(np.int64)
        assert c.ready() == ref.ready() == np.count_nonzero(c.posted | c.cut)
        assert c.ready(some) == ref.ready(some) == np.count_nonzero(c.posted[some] | c.cut[some])
        rows = rng.choice(16, rng.integers(1, 17), replace=False).astype(np.int64)
        cut = rng.random(16) < 0.2
        for k in (c, ref):
            k.cut[:] = cut
            k.in_episode[:] = False
            k.posted[:] = ~cut
            k.handed[:] = False
        got, want = c.take(rows), ref.take(rows)
        for g, w in zip(got, want):
            assert g.keys() == w.keys()
            for k in w:
                assert g[k].dtype == w[k].dtype and np.array_equal(g[k], w[k]), k
        assert want[1]["cut"].any() or not cut[rows].any()
        for k in (*OBS_KEYS, "ent_hi", "bank", "reward", "flags", "episode", "step", "obs_seq",
                  "posted", "handed", "cut", "in_episode", "gen", "stamp"):
            assert np.array_equal(getattr(c, k), getattr(ref, k)), k


def test_c_copies_refuse_a_row_out_of_range():
    if extension_problem() is not None:
        pytest.skip(extension_problem())
    c = CRowCopies(4)
    with pytest.raises(ValueError, match="row 4 is not in 0..3"):
        c.put(np.array([4], np.int64), _batch(np.random.default_rng(0), [0], 32), np.zeros(4, np.int64), 1)
    with pytest.raises(ValueError, match="row -1 is not in 0..3"):
        c.ready(np.array([-1], np.int64))
    with pytest.raises(ValueError, match="gens holds 16 bytes"):
        c.put(np.array([0], np.int64), _batch(np.random.default_rng(0), [0], 32), np.zeros(2, np.int64), 1)
