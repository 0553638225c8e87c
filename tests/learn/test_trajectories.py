"""Trajectories: reward alignment, episode ends, restarts never look finished, back-pressure."""

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from w3async.sync import layout
from w3async.sync.gather import Batch
from w3async.learn.trajectories import TrajConfig, Trajectories

F, D, T = layout.FLAG_FIRST, layout.FLAG_DONE, layout.FLAG_TRUNCATED


class FakeLane:
    """One table row's stream: each posted row has glob[0] = a serial number, and the
    reward for action k is 10 * (serial of the row it was taken at) + 1."""

    def __init__(self, row: int, ep_len: int, trunc_every: int = 0):
        self.row, self.ep_len, self.trunc_every = row, ep_len, trunc_every
        self.serial, self.step, self.episode, self.prev = 0, 0, 0, None

    def post(self):
        """(flags, reward, serial) of the next row."""
        self.serial += 1
        flags = F if self.step == 0 else 0
        reward = 0.0 if self.prev is None or self.step == 0 else 10.0 * self.prev + 1
        last = self.step == self.ep_len
        if last:
            flags |= T if self.trunc_every and self.episode % self.trunc_every == 1 else D
        self.prev = self.serial
        self.step = 0 if last else self.step + 1
        if last:
            self.episode += 1
        return flags, reward, self.serial


def round_of(lanes, rows=None):
    lanes = [ln for ln in lanes if rows is None or ln.row in rows]
    b = Batch(64)
    b.n, b.bucket = len(lanes), 32
    for i, ln in enumerate(lanes):
        f, r, s = ln.post()
        b.rows[i], b.flags[i], b.reward[i], b.glob[i, 0] = ln.row, f, r, s
        b.n_ent[i] = 3
        b.ent_type[i, :3] = 1
    b.mask[: b.n, :, 0] = 1
    res = SimpleNamespace(
        rows=b.rows[: b.n].copy(), actions=np.tile(b.glob[: b.n, :1].astype(np.int32), (1, 4)),
        logp=-b.glob[: b.n, 0].copy(), value=100.0 + b.glob[: b.n, 0], versions=np.full(b.n, 3, np.uint32),
        state_in=None,
    )
    return b, res


def drain(traj):
    out = []
    while (tb := traj.get(0)) is not None:
        out.append(tb)
    return out


def check_batch(tb):
    serial = tb.glob[..., 0]
    assert (tb.action[..., 0] == serial).all() and (tb.logp == -serial).all()
    assert (tb.value == 100 + serial).all()
    for b in range(tb.shape[0]):
        for t in range(tb.shape[1]):
            s = serial[b, t]
            assert tb.reward[b, t] == 10 * s + 1, "the reward of a step is the next row's"
            # the next value is the next row's value (serial + 1 for the same lane)
            assert tb.next_value[b, t] == 100 + s + 1
            if t + 1 < tb.shape[1]:
                ended = tb.done[b, t] or tb.truncated[b, t]
                # after an episode's end the terminal row is skipped: serial jumps by 2
                assert serial[b, t + 1] == s + (2 if ended else 1)
                assert tb.first[b, t + 1] == ended


def test_reward_alignment_and_episode_ends():
    traj = Trajectories(8, TrajConfig(seq_len=4, seqs_per_batch=3, queue_batches=10))
    lanes = [FakeLane(r, ep_len=5, trunc_every=2) for r in range(3)]
    for _ in range(40):
        b, res = round_of(lanes)
        traj.record_obs(b)
        traj.record_answer(res)
    batches = drain(traj)
    assert len(batches) >= 3
    saw_done = saw_trunc = False
    for tb in batches:
        check_batch(tb)
        saw_done |= tb.done.any()
        saw_trunc |= tb.truncated.any()
        assert not (tb.done & tb.truncated).any()
        assert (tb.version == 3).all() and tb.bucket == 32
    assert saw_done and saw_trunc


def test_restart_cut_never_yields_a_finished_episode():
    traj = Trajectories(4, TrajConfig(seq_len=4, seqs_per_batch=1, queue_batches=100))
    lane = FakeLane(0, ep_len=1000)  # never ends by itself
    for i in range(30):
        b, res = round_of([lane])
        traj.record_obs(b)
        if i in (9, 17):  # the game restarts while this row is in flight
            traj.cut([0])
            lane.step = 0  # the restarted game begins a new episode
            lane.prev = None
        traj.record_answer(res)
    # A FIRST row while a step waits for its reward: the old episode ended unseen.
    lane.step, lane.prev = 0, None
    for _ in range(6):
        b, res = round_of([lane])
        traj.record_obs(b)
        traj.record_answer(res)
    batches = drain(traj)
    assert batches
    for tb in batches:
        assert not tb.done.any() and not tb.truncated.any()
        # every step's reward is its own action's: no step straddles a restart
        assert (tb.reward == 10 * tb.glob[..., 0] + 1).all()
    assert traj.stats.cut_steps > 0


def test_rows_that_stop_training_are_cut_and_opponent_rows_ignored():
    traj = Trajectories(4, TrajConfig(seq_len=2, seqs_per_batch=8, queue_batches=4))
    lanes = [FakeLane(0, 50), FakeLane(1, 50)]
    for i in range(7):
        b, res = round_of(lanes)
        train = np.array([True, i < 3])  # row 1 becomes an opponent's at round 3
        traj.record_obs(b, train)
        traj.record_answer(res)
    assert traj._n_steps[1] == 0 and traj._n_steps[0] > 0
    assert traj.stats.cut_steps == 1  # rounds 0-1 made a sequence; round 2's step was cut


def test_answer_before_obs_twice_is_an_error():
    traj = Trajectories(4, TrajConfig(seq_len=2))
    lanes = [FakeLane(0, 50)]
    b, _ = round_of(lanes)
    traj.record_obs(b)
    with pytest.raises(RuntimeError, match="record_answer"):
        traj.record_obs(b)


def test_back_pressure_and_learner_wait():
    traj = Trajectories(4, TrajConfig(seq_len=2, seqs_per_batch=1, queue_batches=1))
    lane = FakeLane(0, 100)
    rounds = 0
    full = False
    while not full:
        b, res = round_of([lane])
        traj.record_obs(b)
        full = traj.record_answer(res)  # back-pressure, as `full` reports it
        rounds += 1
    assert traj.full
    assert rounds == 2 + 1  # one batch of one 2-step sequence (+1: a step completes a round late)
    time.sleep(0.02)
    first = traj.get(0)
    assert first is not None and not traj.full and traj.stats.backpressure_s >= 0.02
    # rows that go on while full: one more batch waits as pending, then sequences are
    # dropped, not queued without bound
    for _ in range(12):
        b, res = round_of([lane])
        traj.record_obs(b)
        traj.record_answer(res)
    assert traj.full and traj.stats.dropped_seqs > 0
    # the learner's wait for data is measured
    empty = Trajectories(4, TrajConfig(seq_len=2))
    got = []
    th = threading.Thread(target=lambda: got.append(empty.get(0.05)))
    th.start()
    th.join()
    assert got == [None] and empty.stats.wait_s >= 0.04
