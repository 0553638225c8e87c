"""Rounds in flight (w3async.learn.inference.flights): futures resolve in launch order whatever
order the rounds finish in, a flight comes back only after its round's finish, a failed
round fails its own future only; and the inference engine's rounds in flight, on a CPU
(the same launch and finish path as the CUDA one), answer as one round at a time does."""

from __future__ import annotations

import random
import threading
from concurrent.futures import Future

import numpy as np
import pytest
import torch

from w3async.learn.inference.flights import Flights
from w3async.learn.inference import InferenceEngine, synthetic_batch
from w3async.learn.network import NetConfig, Network
from w3async.sync import layout

from tests.learn.test_inference import CFG, SPEC, batch_obs, reference, weights


def test_futures_resolve_in_launch_order_whatever_finishes_first():
    flights = Flights(depth=3)
    device_done = [threading.Event() for _ in range(3)]
    order: list[int] = []
    futs = []
    for i in range(3):
        f = flights.acquire()
        fut: Future = Future()
        fut.add_done_callback(lambda _, i=i: order.append(i))
        flights.hand_over(f, fut, lambda i=i: device_done[i].wait(30) and i * 10)
        futs.append(fut)
    for ev in reversed(device_done):  # the device finishes the last round first
        ev.set()
    assert [fut.result(30) for fut in futs] == [0, 10, 20]
    flights.close()
    assert order == [0, 1, 2] and flights.finished == 3


def test_a_flight_comes_back_only_after_its_round_finished():
    """A launcher that writes per-flight buffers: a launch never gets a flight whose round
    has not finished, and never more than `depth` rounds are in flight."""
    flights, rng = Flights(depth=2), random.Random(7)
    busy: set[int] = set()
    lock = threading.Lock()
    worst = [0]
    futs = []

    def finish(flight: int, i: int):
        threading.Event().wait(rng.random() * 0.002)  # the device's time for the round
        with lock:
            busy.remove(flight)
        return i

    for i in range(300):
        f = flights.acquire()
        with lock:
            assert f not in busy, f"flight {f} handed out while its round was in flight"
            busy.add(f)
            worst[0] = max(worst[0], len(busy))
        fut: Future = Future()
        flights.hand_over(f, fut, lambda f=f, i=i: finish(f, i))
        futs.append(fut)
    assert [fut.result(30) for fut in futs] == list(range(300))
    flights.close()
    assert worst[0] == 2 and not busy


def test_acquire_waits_while_every_flight_is_in_flight():
    flights = Flights(depth=1)
    gate = threading.Event()
    first: Future = Future()
    flights.hand_over(flights.acquire(), first, lambda: gate.wait(30))
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(flights.acquire()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not got, "a second round launched while the only flight was in flight"
    gate.set()
    waiter.join(30)
    assert got == [0] and first.result(30) is True
    flights.close()


def test_a_failed_round_fails_its_own_future_and_gives_its_buffers_back():
    flights = Flights(depth=2)
    released: list[int] = []
    futs = []
    for i in range(4):
        fut: Future = Future()

        def finish(i=i):
            if i == 1:
                raise RuntimeError("round 1: the device faulted")
            return i

        flights.hand_over(flights.acquire(), fut, finish, release=lambda i=i: released.append(i))
        futs.append(fut)
    with pytest.raises(RuntimeError, match="round 1"):
        futs[1].result(30)
    assert [futs[i].result(30) for i in (0, 2, 3)] == [0, 2, 3]
    flights.close()
    assert released == [0, 1, 2, 3]


def test_close_finishes_what_is_in_flight_and_a_bad_depth_is_named():
    flights = Flights(depth=2)
    futs = []
    for i in range(2):
        fut: Future = Future()
        flights.hand_over(flights.acquire(), fut, lambda i=i: i)
        futs.append(fut)
    flights.close()
    assert all(f.done() for f in futs) and [f.result() for f in futs] == [0, 1]
    with pytest.raises(ValueError, match="depth=0"):
        Flights(depth=0)


@pytest.mark.parametrize("n_flights", [1, 2, 3])
def test_the_engines_rounds_in_flight_answer_as_one_at_a_time(n_flights):
    """Many rounds submitted at once, rows split over three nets, weights published
    between them: every round answers, in order, with one set of weights it could see
    (the one published before its submit or a later one, never older, never mixed), and
    the engine's buffers all come back."""
    sds = [weights(s) for s in (11, 12, 13)]
    eng = InferenceEngine(SPEC, CFG, n_nets=3, max_rows=64, n_flights=n_flights)
    assert eng.n_flights == n_flights
    rng = np.random.default_rng(n_flights)
    sd_of = {0: {k: v.clone() for k, v in eng.nets[0].state_dict().items()}}
    with eng:
        eng.load_net(1, sds[1], 4)
        eng.load_net(2, sds[2], 7)
        rounds, futs = [], []
        for i in range(12):
            if i % 4 == 0:  # new current weights before every fourth round
                sd_of[100 + i] = sds[0] if i % 8 == 0 else sds[1]
                eng.publish(sd_of[100 + i], 100 + i)
            b = synthetic_batch(SPEC, int(rng.integers(1, 40)), rng)
            net = rng.integers(0, 3, b.n).astype(np.int16)
            futs.append(eng.submit(b, net))
            rounds.append((b.n, batch_obs(b), b.rows[: b.n].copy(), net, max(sd_of)))  # the gatherer reuses b
        results = [f.result(60) for f in futs]
    assert eng._flights is None and eng._free.qsize() >= n_flights + 1, "a round kept its buffers"
    last = 0
    for i, ((n, obs, rows, net, at_submit), res) in enumerate(zip(rounds, results)):
        assert res.stats.rows == n and (res.rows == rows).all() and (res.net == net).all()
        cur = int(res.versions[net == 0][0]) if (net == 0).any() else last
        assert cur >= max(at_submit, last), f"round {i} answered with version {cur}, older than {at_submit}"
        last = cur
        assert (res.versions == np.array([cur, 4, 7])[net]).all(), i
        with torch.no_grad():
            for s, sd in enumerate((sd_of[cur], sds[1], sds[2])):
                j = np.flatnonzero(net == s)
                if len(j) == 0:
                    continue
                ev = reference(sd).evaluate(obs.index(torch.as_tensor(j)), torch.as_tensor(res.actions[j]))
                np.testing.assert_allclose(res.value[j], ev.value.numpy(), atol=1e-4)
                np.testing.assert_allclose(res.logp[j], ev.logp.numpy(), atol=1e-4)


def test_a_round_that_fails_in_flight_fails_its_own_future():
    eng = InferenceEngine(SPEC, CFG, n_nets=1, max_rows=64, n_flights=2)
    rng = np.random.default_rng(0)
    with eng:
        good = eng.submit(synthetic_batch(SPEC, 8, rng))
        good.result(60)  # a round not yet started when weights come would load them too
        with pytest.raises(ValueError, match="weights do not match"):  # refused where it is called
            eng.publish({"not a weight": torch.zeros(1)}, 9)
        with eng._lock:  # a load that fails on the worker (a device error): the next round fails with it
            eng._pending[0] = ({"not a weight": torch.zeros(1)}, 9, None)
        bad = eng.submit(synthetic_batch(SPEC, 8, rng))
        with pytest.raises(Exception):
            bad.result(60)
        after = eng.submit(synthetic_batch(SPEC, 8, rng)).result(60)
    assert good.result(60).stats.rows == 8 and after.stats.rows == 8
    with pytest.raises(ValueError, match="n_flights=-1"):
        InferenceEngine(SPEC, CFG, n_flights=-1)


def test_gru_rounds_in_flight_answer_exactly_as_one_at_a_time():
    """A GRU network's state carries from round to round: 16 rounds submitted back to
    back, rows over two nets, FIRST flags and a game's reset among them, answer with
    the same actions, values and states as the same rounds one at a time (same seed)."""
    cfg = NetConfig(d_model=32, n_heads=4, n_layers=1, gru=True)
    sds = []
    for seed in (21, 22):
        torch.manual_seed(seed)
        sds.append(Network(SPEC, cfg).state_dict())
    results = {}
    for n_flights in (0, 2):
        eng = InferenceEngine(SPEC, cfg, n_nets=2, max_rows=16, n_table_rows=16, n_flights=n_flights, seed=3)
        rng = np.random.default_rng(9)
        with eng:
            for k in (0, 1):
                eng.load_net(k, sds[k], k + 1)
            futs = []
            for i in range(16):
                b = synthetic_batch(SPEC, 12, rng, n_table_rows=16)
                b.rows[:12] = rng.permutation(16)[:12]
                b.flags[:12] = np.where(rng.random(12) < 0.2, layout.FLAG_FIRST, 0)
                futs.append(eng.submit(b, rng.integers(0, 2, 12).astype(np.int16)))
                if i == 7:
                    eng.reset_rows(np.arange(4))  # a game restarted: its rows start again from zeros
            results[n_flights] = [f.result(60) for f in futs]
    for i, (a, b) in enumerate(zip(results[0], results[2])):
        assert (a.rows == b.rows).all() and (a.actions == b.actions).all(), i
        np.testing.assert_array_equal(a.state_in, b.state_in)
        np.testing.assert_array_equal(a.value, b.value)
    assert any((r.state_in != 0).any() for r in results[2]), "the state never carried"
    after = results[2][8]
    reset = np.isin(after.rows, np.arange(4))
    assert reset.any() and (after.state_in[reset] == 0).all(), "the reset did not land before the next round"
