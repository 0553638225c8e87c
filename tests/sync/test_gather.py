"""The C and numpy gather paths give identical batches, bad-row reports and answers;
padding is zero in every round; the checks catch each kind of bad row."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from w3async.sync import layout
from w3async.sync.gather import CGatherer, Doorbell, NumpyGatherer
from w3async.sync.table import Table, segment_name

N_TYPES = 8


@pytest.fixture
def table():
    t = Table(segment_name("gather"), 64)
    yield t
    t.unlink()
    t.close()


def _fill_valid(t: Table, rng: np.random.Generator, rows: np.ndarray) -> None:
    """Post valid observations on rows, with garbage past n_ent (must never leak)."""
    r, lay = t.rows, t.layout
    for i in rows:
        n_ent = int(rng.integers(0, lay.e_max + 1))
        r["act_seq"][i] = r["obs_seq"][i]
        r["obs_seq"][i] += 1
        r["row_magic"][i] = layout.ROW_MAGIC
        r["lane"][i], r["side"][i] = i // 2, i % 2
        r["episode"][i], r["step"][i] = rng.integers(0, 1000), rng.integers(0, 500)
        r["flags"][i] = rng.integers(0, 8)
        r["reward"][i] = rng.normal()
        r["n_ent"][i] = n_ent
        r["state_hash"][i] = rng.integers(0, 2**63)
        r["glob"][i] = rng.normal(size=lay.g_glob)
        r["ent"][i] = rng.normal(size=(lay.e_max, lay.f_ent)) * 100  # garbage beyond n_ent
        r["ent"][i, n_ent:] = np.nan  # not checked, must not leak into the batch
        r["ent_type"][i] = rng.integers(-5, 300, size=lay.e_max)
        r["ent_type"][i, :n_ent] = rng.integers(0, N_TYPES, size=n_ent)
        m = (rng.random((lay.n_heads, lay.head_max)) < 0.3).astype(np.uint8)
        m[:, 0] = 1
        r["mask"][i] = m


def _answered(g, t: Table, rows: np.ndarray) -> None:
    """Mark rows answered as the gatherer would: the table's act_seq and its own record."""
    t.rows["act_seq"][rows] = g.acked[rows] = t.rows["obs_seq"][rows]


BAD_KINDS = ["obs_seq", "row_magic", "n_ent", "flags", "reward", "glob", "ent", "ent_type", "mask", "mask_empty"]


def _spoil(t: Table, i: int, kind: str) -> str:
    r = t.rows
    if kind == "obs_seq":
        r["obs_seq"][i] += 3
    elif kind == "row_magic":
        r["row_magic"][i] = 0xDEAD
    elif kind == "n_ent":
        r["n_ent"][i] = t.layout.e_max + 1
    elif kind == "flags":
        r["flags"][i] = 64
    elif kind == "reward":
        r["reward"][i] = np.inf
    elif kind == "glob":
        r["glob"][i, min(5, t.layout.g_glob - 1)] = np.nan
    elif kind == "ent":
        r["n_ent"][i] = max(int(r["n_ent"][i]), 3)
        r["ent"][i, :3] = 0
        r["ent"][i, 2, min(4, t.layout.f_ent - 1)] = -np.inf
    elif kind == "ent_type":
        r["n_ent"][i] = max(int(r["n_ent"][i]), 2)
        r["ent"][i, :2] = 0
        r["ent_type"][i, :2] = [1, N_TYPES]
    elif kind == "mask":
        r["mask"][i, min(2, t.layout.n_heads - 1), min(7, t.layout.head_max - 1)] = 2
    elif kind == "mask_empty":
        r["mask"][i, t.layout.n_heads - 1] = 0
        return "mask"
    return kind


def _make(table, cls):
    g = cls(table, 4, N_TYPES)
    for k in range(4):
        g.attach_game(k, slice(16 * k, 16 * (k + 1)), Doorbell(-1, 8))
    g.acked[:] = table.rows["act_seq"]  # a gatherer taking over the table: what was published stands
    return g


def _snapshot(b):
    return {name: getattr(b, name)[: b.n].copy() for name in (
        "rows", "obs_seq", "lane", "side", "episode", "step", "flags", "reward", "n_ent", "state_hash",
        "discarded", "glob", "mask")} | {"ent": b.ent.copy(), "ent_type": b.ent_type.copy(), "bucket": b.bucket}


def _same_bad(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x[:3] == y[:3]
        assert (math.isnan(x.value) and math.isnan(y.value)) or x.value == y.value


# Row shapes besides the default: many heads of odd sizes and few odd features, no
# globals, no entities (a flat row), entities past a bucket that is not the last.
SHAPES = [layout.DEFAULT.shape, (7, 5, 3, 8, 200), (5, 7, 0, 2, 9), (0, 0, 8, 1, 3), (40, 3, 2, 1, 40)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", range(6))
def test_c_and_numpy_identical(seed, shape):
    """Both backends on rows of each shape: the same batch, the same bad rows, padding zero."""
    lay = layout.Layout(*shape)
    table = Table(segment_name("gather"), 64, lay=lay)
    try:
        _c_and_numpy_identical(table, seed)
    finally:
        table.unlink()
        table.close()


def _c_and_numpy_identical(table, seed):
    lay = table.layout
    rng = np.random.default_rng(seed)
    waiting = rng.choice(64, size=int(rng.integers(1, 64)), replace=False)
    _fill_valid(table, rng, waiting)
    want_bad = {}
    kinds = [k for k in BAD_KINDS if (k != "glob" or lay.g_glob) and (k not in ("ent", "ent_type") or lay.e_max >= 3)]
    for i, kind in zip(rng.choice(waiting, size=min(len(waiting), len(kinds)), replace=False), kinds):
        want_bad[int(i)] = _spoil(table, int(i), kind)
    c, py = _make(table, CGatherer), _make(table, NumpyGatherer)
    bc, sc = c.gather(), None
    sc = _snapshot(bc)
    bad_c = list(bc.bad)
    bp = py.gather()
    sp = _snapshot(bp)
    _same_bad(bad_c, bp.bad)
    assert {b.row: b.field for b in bad_c} == want_bad
    assert sc.keys() == sp.keys()
    for k in sc:
        np.testing.assert_array_equal(sc[k], sp[k], err_msg=k)
    assert sorted(sc["rows"].tolist()) == sorted(set(waiting.tolist()) - set(want_bad))
    # padding is zero, and the bucket is the smallest that holds the largest n_ent
    n_ent = sc["n_ent"].astype(int)
    live = np.arange(sc["bucket"])[None, :] < n_ent[:, None]
    assert not sc["ent"][~live].any() and not sc["ent_type"][~live].any()
    assert np.isfinite(sc["ent"]).all()
    if len(n_ent):
        assert sc["bucket"] == min(b for b in lay.buckets if b >= n_ent.max())
        assert sc["glob"].shape[1:] == (lay.g_glob,) and sc["mask"].shape[1:] == (lay.n_heads, lay.head_max)


def test_padding_zeroed_after_a_bigger_round(table):
    """The batch buffers are reused: a round of small rows after a round of big ones
    must not see the big round's entities (measured in a Warcraft III harness under Wine: a stale unit type in recycled
    padding killed a run)."""
    rng = np.random.default_rng(1)
    for cls in (CGatherer, NumpyGatherer):
        g = _make(table, cls)
        rows = np.arange(8)
        _fill_valid(table, rng, rows)
        table.rows["n_ent"][rows] = layout.E_MAX
        table.rows["ent"][rows] = 5.0
        table.rows["ent_type"][rows] = 3
        b = g.gather()
        assert b.n == 8 and b.bucket == layout.E_MAX
        _answered(g, table, rows)
        _fill_valid(table, rng, rows)
        table.rows["n_ent"][rows] = 5
        table.rows["ent"][rows] = 1.0
        table.rows["ent_type"][rows] = 1
        b = g.gather()
        assert b.bucket == 32
        assert (b.ent[:, :5] == 1.0).all() and not b.ent[:, 5:].any()
        assert (b.ent_type[:, :5] == 1).all() and not b.ent_type[:, 5:].any()
        _answered(g, table, rows)


def test_answers_identical_and_rings_once_per_game(table):
    rng = np.random.default_rng(7)
    results = []
    for cls in (CGatherer, NumpyGatherer):
        table.rows[:] = np.zeros((), layout.ROW_DTYPE)
        bells = [os.eventfd(0, os.EFD_NONBLOCK) for _ in range(4)]
        g = cls(table, 4, N_TYPES)
        for k in range(4):
            g.attach_game(k, slice(16 * k, 16 * (k + 1)), Doorbell(bells[k], 8))
        rows = np.array([1, 2, 17, 40, 41, 42])
        _fill_valid(table, rng, rows)
        b = g.gather()
        actions = np.arange(b.n * layout.N_HEADS, dtype=np.int32).reshape(b.n, layout.N_HEADS)
        versions = np.full(b.n, 9, np.uint32)
        rung = g.answer(b.rows[: b.n], b.obs_seq[: b.n], actions, versions)
        assert rung == 3  # games 0, 1 and 2
        counts = []
        for fd in bells:
            try:
                counts.append(int.from_bytes(os.read(fd, 8), "little"))
            except BlockingIOError:
                counts.append(0)
            os.close(fd)
        assert counts == [1, 1, 1, 0]
        assert (table.rows["act_seq"][rows] == table.rows["obs_seq"][rows]).all()
        assert g.gather().n == 0  # answered rows are no longer waiting
        results.append(table.rows[["action", "policy_version", "act_seq"]][rows].copy())
    np.testing.assert_array_equal(results[0]["action"], results[1]["action"])
    np.testing.assert_array_equal(results[0]["policy_version"], results[1]["policy_version"])


def test_rows_of_no_game_are_ignored(table):
    rng = np.random.default_rng(3)
    for cls in (CGatherer, NumpyGatherer):
        g = _make(table, cls)
        g.detach_game(1)
        rows = np.array([0, 20, 33])  # 20 belongs to game 1
        _fill_valid(table, rng, rows)
        b = g.gather()
        assert sorted(b.rows[: b.n].tolist()) == [0, 33]
        _answered(g, table, rows)


@pytest.mark.parametrize("cls", [CGatherer, NumpyGatherer])
def test_stale_answer_never_lands_on_a_restarted_game(table, cls):
    """A round that computed while its game restarted: the new game's rows (zeroed,
    then posted afresh) must not take the old answer."""
    rng = np.random.default_rng(5)
    g = _make(table, cls)
    rows = np.array([3, 4])
    _fill_valid(table, rng, rows)
    table.rows["obs_seq"][rows] = [40, 41]
    table.rows["act_seq"][rows] = g.acked[rows] = [39, 40]
    b = g.gather()
    old_rows, old_seq = b.rows[: b.n].copy(), b.obs_seq[: b.n].copy()
    g.hold(old_rows)
    assert g.gather().n == 0  # held rows are not gathered again
    # the game restarts: rows detached, zeroed, re-attached, and the new game posts seq 1
    g.detach_game(0)
    table.reset_rows(0, 16)
    g.attach_game(0, slice(0, 16), Doorbell(-1, 8))
    _fill_valid(table, rng, rows)
    g.release(old_rows)
    acts = np.full((2, layout.N_HEADS), 99, np.int32)
    g.answer(old_rows, old_seq, acts, np.zeros(2, np.uint32))
    assert (table.rows["act_seq"][rows] == 0).all() and (table.rows["action"][rows] == 0).all()
    b = g.gather()
    assert sorted(b.rows[: b.n].tolist()) == [3, 4]  # the new game's rows still wait


@pytest.mark.parametrize("cls", [CGatherer, NumpyGatherer])
def test_hold_and_release(table, cls):
    rng = np.random.default_rng(6)
    g = _make(table, cls)
    rows = np.array([1, 17, 33])
    _fill_valid(table, rng, rows)
    g.hold(np.array([17]))
    b = g.gather()
    assert sorted(b.rows[: b.n].tolist()) == [1, 33]
    g.release(np.array([17]))
    g.release(np.array([1]))  # not held: unchanged
    b = g.gather()
    assert sorted(b.rows[: b.n].tolist()) == [1, 17, 33]
    assert g.row_game[[1, 17, 33]].tolist() == [0, 1, 2]
    g.hold(np.array([33]))
    g.detach_game(2)
    g.release(np.array([33]))
    assert g.row_game[33] == -1


@pytest.mark.parametrize("cls", [CGatherer, NumpyGatherer])
def test_a_gather_that_holds_and_an_answer_that_releases(table, cls):
    """gather(hold=True) holds each valid row it gathers (a bad one is left for the
    round that reports it); answer(release=True) releases the held rows it answers in
    the same call, a row detached meanwhile stays detached and gets no answer."""
    rng = np.random.default_rng(11)
    g = _make(table, cls)
    rows = np.array([1, 2, 17, 33, 34])
    _fill_valid(table, rng, rows)
    _spoil(table, 2, "glob")
    b = g.gather(hold=True)
    got = b.rows[: b.n].copy()
    seq = b.obs_seq[: b.n].copy()
    assert sorted(got.tolist()) == [1, 17, 33, 34]
    assert g.row_game[[1, 2, 17, 33, 34]].tolist() == [-2, 0, -3, -4, -4]
    assert g.gather().n == 0 and [x.row for x in g.batch.bad] == [2]  # held rows are not gathered again
    g.detach_game(2)  # rows 33 and 34: their game ended while they were held
    acts = np.full((len(got), layout.N_HEADS), 5, np.int32)
    g.answer(got, seq, acts, np.zeros(len(got), np.uint32), release=True)
    assert g.row_game[[1, 2, 17, 33, 34]].tolist() == [0, 0, 1, -1, -1]
    assert (table.rows["act_seq"][[1, 17]] == table.rows["obs_seq"][[1, 17]]).all()
    assert (table.rows["act_seq"][[33, 34]] != table.rows["obs_seq"][[33, 34]]).all()
    assert (table.rows["action"][[1, 17], : layout.N_HEADS] == 5).all() and not table.rows["action"][[33, 34]].any()


def test_batch_select_compacts_in_place(table):
    rng = np.random.default_rng(9)
    g = _make(table, CGatherer)
    rows = np.array([2, 5, 9, 20, 40])
    _fill_valid(table, rng, rows)
    b = g.gather()
    before = _snapshot(b)
    keep = np.array([True, False, True, False, True])
    b.select(keep)
    after = _snapshot(b)
    assert b.n == 3 and after["bucket"] == before["bucket"]
    for k in before:
        if k != "bucket":
            np.testing.assert_array_equal(after[k], before[k][keep], err_msg=k)


def test_the_c_gatherer_takes_its_buffers_by_name(table):
    """csrc/rows.c's Gatherer takes every buffer by its keyword (no positional order to
    keep in step): one missing, one too small or a positional call is refused by name."""
    from w3async.sync import _rows

    g = _make(table, CGatherer)
    b = g.batch
    kw = dict(n_rows=table.n_rows, n_types=N_TYPES, shape=table.layout.shape, table=table.rows_buffer, row_game=g.row_game, acked=g.acked,
              act_fd=g.act_fd, act_len=g.act_len, buckets=g.buckets, rows=b.rows, obs_seq=b.obs_seq, lane=b.lane,
              side=b.side, episode=b.episode, step=b.step, flags=b.flags, reward=b.reward, n_ent=b.n_ent,
              state_hash=b.state_hash, discarded=b.discarded, glob=b.glob, ent=b.ent_flat, ent_type=b.type_flat,
              mask=b.mask)
    _rows.Gatherer(**kw)  # the whole set is taken
    with pytest.raises(TypeError, match="keywords only"):
        _rows.Gatherer(*kw.values())
    with pytest.raises(TypeError, match="missing keyword state_hash"):
        _rows.Gatherer(**{k: v for k, v in kw.items() if k != "state_hash"}, stat_hash=b.state_hash)
    with pytest.raises(ValueError, match="reward holds 4 bytes"):
        _rows.Gatherer(**dict(kw, reward=np.zeros(1, np.float32)))
    with pytest.raises(ValueError, match="shape \\(0, 0, 8, 9, 3\\) is out of range"):
        _rows.Gatherer(**dict(kw, shape=(0, 0, 8, 9, 3)))
    with pytest.raises(ValueError, match="table holds"):  # a larger shape than the table's rows
        _rows.Gatherer(**dict(kw, shape=(160, 16, 32, 4, 4096)))


@pytest.mark.parametrize("shape", SHAPES[1:4])
@pytest.mark.parametrize("cls", [CGatherer, NumpyGatherer])
def test_answers_of_a_shapes_heads_land_in_its_rows(shape, cls):
    """An answer of n_heads choices a row lands in the row's first n_heads action slots;
    the slots past them stay 0 (the game's heads are the spec's)."""
    lay = layout.Layout(*shape)
    table = Table(segment_name("gather"), 64, lay=lay)
    try:
        g = _make(table, cls)
        rows = np.array([3, 17, 40])
        _fill_valid(table, np.random.default_rng(2), rows)
        b = g.gather()
        assert b.n == 3 and b.mask.shape[1:] == (lay.n_heads, lay.head_max)
        acts = np.arange(3 * lay.n_heads, dtype=np.int32).reshape(3, lay.n_heads)
        g.answer(b.rows[:3].copy(), b.obs_seq[:3].copy(), acts, np.full(3, 9, np.uint32))
        got = table.rows["action"][b.rows[:3]]
        np.testing.assert_array_equal(got[:, : lay.n_heads], acts)
        assert not got[:, lay.n_heads:].any() and (table.rows["policy_version"][rows] == 9).all()
        assert (table.rows["act_seq"][rows] == table.rows["obs_seq"][rows]).all()
    finally:
        table.unlink()
        table.close()
