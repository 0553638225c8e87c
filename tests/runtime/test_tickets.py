"""The stale-answer rule, kept by RunControl (runtime/answerer.py) for every answerer: a
game that restarts while a round computes for its rows gets no answer from that round,
the new game's hold is not released by it, and the new game is answered by a later
round. The old and the new game both post obs_seq 1 (a restarted game counts from 1
again), so the gatherer's sequence check alone cannot tell the answers apart: only the
rows' generations can.

Driven on a real supervisor's table, gatherer and RunControl (set up, no game process:
the test posts rows and restarts games as the keeper does), for the four answerers:
Training, EvalAnswerer, a game host's RemoteAnswerer and the centre's ClusterLink (its
HostLink rows). The cluster's two are driven without Ray: the host's outbox and the
centre's ops are read where they leave the process (the Ray runs: tests/cluster/test_cluster.py).
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

from w3async import compose
from w3async.cluster import wire
from w3async.recipes import recipe_from_dict
from w3async.runtime.supervisor import Supervisor
from w3async.sync import layout
from w3async.sync.doorbells import Doorbell
from w3async.sync.gather import Batch

from tests.conftest import REPO
from tests.runtime.test_supervisor import null_recipe

NULL = str(REPO / "build/native/null_game")
GAME = 1  # the game slot the test restarts (rows 2, 3); slot 0 (rows 0, 1) is left alone
ROWS = np.array([2, 3])


class Deferred:
    """An Answerer that answers only when the test says (a round that computes long)."""

    failure = None
    gathers = False

    def __init__(self, control):
        self.control = control
        self.tickets = []
        self.resets: list[slice] = []

    def start(self, loop):
        pass

    def submit(self, b):
        self.tickets.append(self.control.take(b.rows[: b.n].astype(np.int64)))

    def rows_reset(self, rows):
        self.resets.append(rows)

    def flush_round_stats(self):
        return None

    def progress(self):
        return ""

    def stop(self):
        pass


async def _set_up(tmp_path, answerer=None, cluster=None, **sections) -> Supervisor:
    data = null_recipe([{"binary": NULL, "count": 2, "lanes": 1}], **sections)  # two rows a game (two sides)
    sup = compose.supervisor(recipe_from_dict(data), tmp_path / "run", answerer=answerer, signals=False,
                             cluster=cluster)
    await sup.setup()
    for s in sup.slots:
        sup.gatherer.attach_game(s.index, s.rows, _bell(s.index))
    return sup


_BELLS: dict[int, Doorbell] = {}


@pytest.fixture(autouse=True, scope="module")
def _close_bells():
    yield
    for bell in _BELLS.values():
        os.close(bell.fd)
    _BELLS.clear()


def _bell(game: int) -> Doorbell:
    if game not in _BELLS:
        _BELLS[game] = Doorbell(os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC), 8)
    return _BELLS[game]


def _post(sup: Supervisor, rows: np.ndarray, seq: int) -> Batch:
    """The game posts obs_seq `seq` on rows: the batch a gather makes of them."""
    sup.table.column("obs_seq")[rows] = seq
    b = Batch(len(rows))
    b.n, b.bucket = len(rows), b.bucket
    b.rows[: b.n] = rows
    b.obs_seq[: b.n] = seq
    b.mask[: b.n] = 1  # every action allowed
    return b


def _restart(sup: Supervisor) -> None:
    """What the keeper does when the game exits and starts again (unwire, then wire)."""
    s = sup.slots[GAME]
    sup.gatherer.detach_game(GAME)
    sup.table.reset_rows(s.row0, s.row0 + s.nrows)
    sup.control.rows_reset(s.rows)
    sup.gatherer.attach_game(GAME, s.rows, _bell(GAME))


def _held(sup: Supervisor) -> bool:
    return bool((sup.gatherer.row_game[ROWS] <= -2).all())


def _act_seq(sup: Supervisor) -> list[int]:
    return sup.table.column("act_seq")[ROWS].tolist()


async def test_run_control_drops_a_stale_answer_and_keeps_the_new_hold(tmp_path):
    sup = await _set_up(tmp_path, answerer=Deferred)
    try:
        c, d = sup.control, sup.answerer
        d.submit(_post(sup, ROWS, 1))
        old = d.tickets[-1]
        assert _held(sup) and c.in_flight(ROWS).all()
        _restart(sup)  # mid-round
        assert d.resets == [sup.slots[GAME].rows]  # the answerer heard it, after the bump
        assert not c.current(old).any() and not _held(sup)
        d.submit(_post(sup, ROWS, 1))  # the new game's first round
        new = d.tickets[-1]
        acts = np.full((2, layout.N_HEADS), 7, np.int32)
        assert not c.answer(old, old.rows * 0 + 1, acts, np.zeros(2, np.uint32)).any()
        assert not c.release(old).any()
        assert _held(sup) and _act_seq(sup) == [0, 0] and c.counters.agent_steps == 0
        assert c.answer(new, np.ones(2, np.uint64), acts + 1, np.zeros(2, np.uint32)).all()
        assert not _held(sup) and _act_seq(sup) == [1, 1]
        assert (sup.table.column("action")[ROWS, : layout.N_HEADS] == 8).all() and c.counters.agent_steps == 2
        assert not c.answer(new, np.ones(2, np.uint64), acts, np.zeros(2, np.uint32)).any()  # answered once
    finally:
        await sup.close()


async def _until(cond, what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        assert loop.time() < end, what
        await asyncio.sleep(0.005)


NET = {"network": {"d_model": 16, "n_heads": 2, "n_layers": 1}, "inference": {"num_threads": 1}}


@pytest.mark.parametrize("kind", ["training", "eval"])
async def test_the_network_answerers_drop_the_round_of_a_restarted_game(tmp_path, kind):
    if kind == "training":
        sup = await _set_up(tmp_path, supervisor={"policy": "network"}, status={"enabled": False}, **NET)
    else:
        from w3async.learn.evaluate import EvalAnswerer
        from w3async.learn.network import Network

        def make(control):
            return EvalAnswerer(control, Network(control.spec, control.recipe.network), 0,
                                np.full(control.n_rows, 100), ["x"] * control.n_rows)

        sup = await _set_up(tmp_path, answerer=make, **NET)
    a = sup.answerer
    a.start(asyncio.get_running_loop())
    try:
        a.submit(_post(sup, ROWS, 1))  # its answer comes back on the loop: not before the next await
        _restart(sup)
        a.engine.publish(a.engine.nets[0].state_dict(), 5)  # the new game's round answers with version 5
        a.submit(_post(sup, ROWS, 1))
        assert _held(sup)
        await _until(lambda: sup.counters.agent_steps == 2, "the new game's round was not answered")
        await asyncio.sleep(0.2)  # a stale answer landing late would show here
        assert not _held(sup) and _act_seq(sup) == [1, 1]
        assert sup.table.column("policy_version")[ROWS].tolist() == [5, 5]  # the new round's, not the stale one's
        assert sup.counters.agent_steps == 2 and sup.counters.rounds == 1  # the stale round answered nothing
        if kind == "training":
            assert (a.rows_submitted, a.rows_answered, a.rows_stale, a.answer_errors) == (4, 2, 2, 0)
    finally:
        await asyncio.get_running_loop().run_in_executor(None, a.stop)
        await sup.close()


class Outbox:
    """The GameHost's side the RemoteAnswerer talks to: what it sends to the centre."""

    def __init__(self):
        self.sent: list[dict] = []
        self.round_trips: list[float] = []
        self.restarts = 0

    def send(self, msg):
        self.sent.append(msg)

    def restart_games(self):
        self.restarts += 1


async def test_a_game_host_drops_the_centres_stale_answer(tmp_path):
    from w3async.cluster.gamehost import RemoteAnswerer

    out = Outbox()
    sup = await _set_up(tmp_path, answerer=lambda control: RemoteAnswerer(control, out))
    try:
        a = sup.answerer
        a.submit(_post(sup, ROWS, 1))
        old = out.sent[-1]
        _restart(sup)
        reset = out.sent[-1]
        assert isinstance(reset, wire.Reset) and (reset.gen > old.gen).all()
        a.submit(_post(sup, ROWS, 1))
        new = out.sent[-1]

        def answer(msg, action):
            return wire.Answer(msg.scalars["rows"], msg.gen, msg.scalars["obs_seq"],
                               np.full((2, layout.N_HEADS), action, np.int32), np.zeros(2, np.uint32))

        a.apply([answer(old, 7), wire.Release(old.scalars["rows"], old.gen)])  # made for the game before: dropped
        assert _held(sup) and _act_seq(sup) == [0, 0] and sup.counters.agent_steps == 0
        a.apply([answer(new, 8)])
        assert not _held(sup) and _act_seq(sup) == [1, 1] and (sup.table.column("action")[ROWS, : layout.N_HEADS] == 8).all()
    finally:
        await sup.close()


async def test_the_centre_drops_a_stale_answer_and_names_the_hosts_generation(tmp_path):
    from w3async.cluster.link import ClusterLink

    data = null_recipe([{"binary": NULL, "count": 1, "lanes": 1},
                        {"binary": NULL, "count": 1, "lanes": 1, "host": "node1"}],
                       cluster={"local_nodes": 1})
    sup = compose.supervisor(recipe_from_dict(data), tmp_path / "run", answerer=Deferred, signals=False, cluster=ClusterLink)
    await sup.setup()
    try:
        c, d, h = sup.control, sup.answerer, sup.cluster.hosts_[0]
        sup.cluster.control, sup.cluster.answerer = c, d  # what start() gives the link, without Ray
        state = dict(incarnation="i1", node="n", pid=1, agent_steps=0, failure=None)

        def host_round(n, gen):
            b = Batch(2)
            b.n, b.rows[:2], b.obs_seq[:2] = 2, [0, 1], 1
            sup.cluster._take(h, [(n, wire.pack(b, np.full(2, gen)))], state)
            return d.tickets[-1]

        old = host_round(1, 1)
        assert (old.rows == [h.row0, h.row0 + 1]).all()
        sup.cluster._take(h, [(2, wire.Reset(0, 2, np.full(2, 2)))], state)  # mid-round
        assert d.resets == [slice(h.row0, h.row0 + 2)]
        new = host_round(3, 2)
        acts = np.zeros((2, layout.N_HEADS), np.int32)
        assert not c.answer(old, np.ones(2, np.uint64), acts, np.zeros(2, np.uint32)).any()
        assert h.ops == []  # nothing goes to the host for the game before
        assert c.answer(new, np.ones(2, np.uint64), acts, np.zeros(2, np.uint32)).all()
        assert [(type(o), o.rows.tolist(), o.gen.tolist()) for o in h.ops] == [(wire.Answer, [0, 1], [2, 2])]
    finally:
        await sup.close()
