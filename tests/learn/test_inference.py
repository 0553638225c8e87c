"""The inference engine: the right network per row, copies at submit, atomic publish."""

import threading

import numpy as np
import pytest
import torch

from w3async.sync import layout
from w3async.learn.inference import InferenceEngine, synthetic_batch
from w3async.learn.network import NetConfig, Network, obs_from_numpy
from w3async.games.spec import GameSpec

torch.set_num_threads(1)  # shared 2-core machine: OpenMP's spinning threads slow small calls

SPEC = GameSpec("t", n_types=5, head_sizes=(6, 3, 2, layout.E_MAX), pointer_head=3)
CFG = NetConfig(d_model=32, n_heads=4, n_layers=1)


def weights(seed: int) -> dict:
    torch.manual_seed(seed)
    return Network(SPEC, CFG).state_dict()


def reference(sd: dict, gru: bool = False) -> Network:
    net = Network(SPEC, NetConfig(**{**CFG.__dict__, "gru": gru})).eval()
    net.load_state_dict(sd)
    return net


def batch_obs(b):
    return obs_from_numpy(b.glob[: b.n], b.ent.copy(), b.ent_type.copy(), b.n_ent[: b.n], b.mask[: b.n])


# The CUDA path runs only where a GPU is (unchecked on this project's CPU machines).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))]


@pytest.fixture(params=DEVICES)
def engine(request):
    eng = InferenceEngine(SPEC, CFG, n_nets=3, max_rows=64, device=request.param)
    eng.start()
    yield eng
    eng.stop()


def test_each_row_gets_the_answer_of_its_net(engine):
    sds = [weights(s) for s in (1, 2, 3)]
    engine.publish(sds[0], 10)
    engine.load_net(1, sds[1], 4)
    engine.load_net(2, sds[2], 7)
    rng = np.random.default_rng(0)
    b = synthetic_batch(SPEC, 40, rng)
    nets = rng.integers(0, 3, 40).astype(np.int16)
    res = engine.submit(b, nets).result()
    obs = batch_obs(b)
    assert (res.rows == b.rows[:40]).all() and (res.obs_seq == b.obs_seq[:40]).all()
    assert (res.net == nets).all()
    assert (res.versions == np.array([10, 4, 7])[nets]).all()
    with torch.no_grad():
        for s in range(3):
            i = np.flatnonzero(nets == s)
            ev = reference(sds[s]).evaluate(obs.index(torch.as_tensor(i)), torch.as_tensor(res.actions[i]))
            np.testing.assert_allclose(res.value[i], ev.value.numpy(), atol=1e-4)
            np.testing.assert_allclose(res.logp[i], ev.logp.numpy(), atol=1e-4)
            assert np.isfinite(res.logp[i]).all()  # every sampled action was allowed
    assert res.stats.rows == 40 and res.stats.nets == 3


def test_submit_copies_the_batch_and_stale_padding_never_shows(engine):
    rng = np.random.default_rng(1)
    big = synthetic_batch(SPEC, 16, rng, max_ent=100)  # fills the engine's buffers far out
    small = synthetic_batch(SPEC, 16, np.random.default_rng(2), max_ent=20)
    assert big.bucket > small.bucket
    expect = reference({k: v.cpu() for k, v in engine.nets[0].state_dict().items()})
    with torch.no_grad():
        want = expect.evaluate(batch_obs(small), torch.zeros(16, 4, dtype=torch.long)).value.numpy()
    engine.submit(big).result()
    fut = engine.submit(small)
    small.glob[:] = 99.0  # the gatherer reuses its buffers at once: the round must not see it
    small.ent_flat[:] = 99.0
    res = fut.result()
    np.testing.assert_allclose(res.value, want, atol=1e-4)


def test_publish_is_atomic_at_round_boundaries(engine):
    sd_a, sd_b = weights(5), weights(6)
    rng = np.random.default_rng(3)
    b = synthetic_batch(SPEC, 32, rng)
    obs = batch_obs(b)
    with torch.no_grad():
        want = {v: reference(sd).evaluate(obs, torch.zeros(32, 4, dtype=torch.long)).value.numpy()
                for v, sd in ((1, sd_a), (2, sd_b))}
    stop = threading.Event()

    def publisher():
        i = 0
        while not stop.is_set():
            engine.publish(sd_a if i % 2 == 0 else sd_b, 1 if i % 2 == 0 else 2)
            i += 1

    engine.publish(sd_a, 1)
    th = threading.Thread(target=publisher)
    th.start()
    try:
        seen = set()
        for _ in range(60):
            res = engine.submit(b).result()
            v = int(res.versions[0])
            assert (res.versions == v).all()
            np.testing.assert_allclose(res.value, want[v], atol=1e-4)
            seen.add(v)
    finally:
        stop.set()
        th.join()
    assert seen == {1, 2}


def test_rounds_overlap_without_sharing_buffers(engine):
    rng = np.random.default_rng(4)
    batches = [synthetic_batch(SPEC, 8, rng) for _ in range(5)]
    net = reference({k: v.cpu() for k, v in engine.nets[0].state_dict().items()})
    futs = [engine.submit(b) for b in batches]  # more in flight than the 2 buffers
    for b, f in zip(batches, futs):
        with torch.no_grad():
            want = net.evaluate(batch_obs(b), torch.zeros(8, 4, dtype=torch.long)).value.numpy()
        np.testing.assert_allclose(f.result().value, want, atol=1e-4)


def test_unloaded_net_and_unstarted_engine_are_clear_errors():
    eng = InferenceEngine(SPEC, CFG, n_nets=2, max_rows=8)
    b = synthetic_batch(SPEC, 4, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="start"):
        eng.submit(b)
    eng.start()
    try:
        with pytest.raises(ValueError, match="load_net"):
            eng.submit(b, np.array([0, 1, 0, 0]))
        with pytest.raises(ValueError, match="max_rows"):
            eng.submit(synthetic_batch(SPEC, 9, np.random.default_rng(0)))
    finally:
        eng.stop()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n_flights, gru_graphs", [(None, True), (2, True), (None, False)],
                         ids=["default", "in-flight", "cuda-eager"])
def test_gru_state_is_kept_per_row_and_reset_on_first(device, n_flights, gru_graphs):
    """On a CPU one round at a time (default) or in flight; on CUDA graphed, in flight
    (default and 2) or eager (the fallback): the same state per row."""
    eng = InferenceEngine(SPEC, NetConfig(d_model=32, n_heads=4, n_layers=1, gru=True), max_rows=8, n_table_rows=8,
                          device=device, n_flights=n_flights, gru_graphs=gru_graphs)
    with eng:
        b = synthetic_batch(SPEC, 4, np.random.default_rng(0))
        b.flags[:4] = layout.FLAG_FIRST
        r1 = eng.submit(b).result()
        assert (r1.state_in == 0).all()
        b.flags[:4] = 0
        r2 = eng.submit(b).result()
        assert not (r2.state_in == 0).all()
        assert not np.allclose(r1.value, r2.value)
        b.flags[:4] = layout.FLAG_FIRST
        r3 = eng.submit(b).result()
        np.testing.assert_allclose(r3.value, r1.value, atol=1e-6)
        # a restart's reset is queued behind the rounds in flight and before later ones
        b.flags[:4] = 0
        eng.submit(b)
        eng.reset_rows(np.arange(4))
        r4 = eng.submit(b).result()
        assert (r4.state_in == 0).all()


def test_round_stats(engine):
    """Each round's RoundStats (Training aggregates them into inference.jsonl): its rows,
    bucket and networks, and times that nest (latency covers compute, compute the networks)."""
    rng = np.random.default_rng(5)
    for n in (4, 8, 12):
        b = synthetic_batch(SPEC, n, rng)
        st = engine.submit(b).result().stats
        assert st.rows == n and st.bucket == b.bucket and st.nets == 1
        assert st.latency_ms >= st.compute_ms >= st.net_ms > 0 and st.copy_ms >= 0


def test_padding_is_zero_in_every_round(engine):
    """What the network sees: past each row's n_ent, features and type ids are zero,
    even after a round with more entities filled the engine's buffers."""
    if engine.device.type == "cuda":
        pytest.skip("CUDA graphs replay without calling act(); what they gather: tests/learn/test_cuda_runner.py")
    seen = []
    net = engine.nets[0]
    real_act = net.act

    def spy(obs, *a, **kw):
        seen.append(tuple(t.detach().cpu().clone() for t in obs))
        return real_act(obs, *a, **kw)

    net.act = spy
    rng = np.random.default_rng(7)
    for max_ent in (150, 20, 90, 5, 40):
        b = synthetic_batch(SPEC, 24, rng, max_ent=max_ent)
        engine.submit(b).result()
    assert len(seen) == 5
    for glob, ent, ent_type, n_ent, mask in seen:
        pad = torch.arange(ent.shape[1])[None, :] >= n_ent[:, None]
        assert (ent[pad] == 0).all() and (ent_type[pad] == 0).all()


def test_submit_never_races_the_worker_applying_a_new_net():
    """submit() checked a net against `versions` and `_pending`, and the
    worker empties _pending before it sets `versions`: a submit in that window (a round
    applying a net's first weights) was refused with "were never loaded". Here a net's
    first load is followed by submits in a tight loop while the worker applies it, many
    times over; every one must be accepted and answered by the loaded weights."""
    big = NetConfig(d_model=64, n_heads=4, n_layers=2)  # a load_state_dict the loop can overlap
    torch.manual_seed(3)
    sd = Network(SPEC, big).state_dict()
    rng = np.random.default_rng(5)
    b = synthetic_batch(SPEC, 4, rng, max_ent=8)
    ones = np.ones(4, np.int16)
    overlapped = 0
    for i in range(40):
        eng = InferenceEngine(SPEC, big, n_nets=2, max_rows=8)
        eng.start()
        try:
            eng.load_net(1, sd, 100 + i)
            futs = [eng.submit(b, ones)]
            while not futs[0].done():  # submits while the worker applies net 1's first weights
                futs.append(eng.submit(b, ones))
            overlapped += len(futs) > 1
            for f in futs:
                assert (f.result().versions == 100 + i).all()
        finally:
            eng.stop()
    assert overlapped >= 20, overlapped  # the window was hit, not stepped around
    eng = InferenceEngine(SPEC, CFG, n_nets=2, max_rows=8)
    eng.start()
    try:
        with pytest.raises(ValueError, match="never loaded"):
            eng.submit(b, ones)  # a net nothing was asked to load is still refused
    finally:
        eng.stop()


def test_sampled_actions_obey_the_masks_and_follow_the_policy(engine):
    """Every sampled choice is allowed by its row's mask, on every head, in rounds of
    several sizes (each its own graph on CUDA); and the draws follow the policy's own
    probabilities: with two choices allowed on one head, the count of the second is
    what the returned log-probabilities say, within 5 standard deviations."""
    rng = np.random.default_rng(7)
    for n in (1, 5, 17, 40, 64):
        for _ in range(10):
            b = synthetic_batch(SPEC, n, rng, max_ent=40)
            r = engine.submit(b).result()
            for h in range(layout.N_HEADS):
                assert b.mask[np.arange(n), h, r.actions[:, h]].all(), f"head {h}: a masked-out choice drawn"
            assert np.isfinite(r.logp).all() and (r.logp <= 0).all() and np.isfinite(r.value).all()
    b = synthetic_batch(SPEC, 64, rng, max_ent=40)
    b.mask[:64] = 0
    b.mask[:64, :, 0] = 1
    b.mask[:64, 0, 1] = 1  # head 0: choices 0 and 1; every other head: only 0
    ones, expect, var = 0, 0.0, 0.0
    for _ in range(30):
        r = engine.submit(b).result()
        a = r.actions[:, 0]
        assert set(np.unique(a)) <= {0, 1} and (r.actions[:, 1:] == 0).all()
        p_drawn = np.exp(r.logp.astype(np.float64))  # the joint is head 0's alone here
        p1 = np.where(a == 1, p_drawn, 1 - p_drawn)
        ones += int((a == 1).sum())
        expect += p1.sum()
        var += (p1 * (1 - p1)).sum()
    assert abs(ones - expect) < 5 * np.sqrt(var) + 1, (ones, expect, var)
    assert 0 < ones < 64 * 30 or var < 1  # both drawn unless the policy is all but certain


def test_weights_on_the_engines_device_are_published_like_any(engine):
    """A learner on the engine's device publishes weights that live there (on CUDA a
    device-to-device copy and an event, not a trip through the host): the next round
    answers with them, and changing them afterwards changes nothing the engine holds."""
    sd = {k: v.to(engine.device) for k, v in weights(8).items()}
    b = synthetic_batch(SPEC, 24, np.random.default_rng(4))
    with torch.no_grad():
        want = reference(weights(8)).evaluate(batch_obs(b), torch.zeros(24, 4, dtype=torch.long)).value.numpy()
    engine.publish(sd, 3)
    for t in sd.values():  # the learner goes on training: the published copy must not move
        t.add_(1.0)
    for _ in range(3):
        res = engine.submit(b).result()
        assert (res.versions == 3).all()
        np.testing.assert_allclose(res.value, want, atol=1e-4)


def test_a_failed_load_keeps_the_other_nets_weights_pending():
    """One net's weights that cannot load must not drop another's pending ones,
    nor leave submit() taking the failed net as loaded."""
    eng = InferenceEngine(SPEC, CFG, n_nets=3, max_rows=64)
    rng = np.random.default_rng(0)
    b = synthetic_batch(SPEC, 12, rng)
    with eng:
        eng.load_net(1, weights(5), 5)
        wrong = Network(SPEC, NetConfig(**{**CFG.__dict__, "d_model": 16})).state_dict()
        with pytest.raises(ValueError, match="net 2: weights of another shape"):
            eng.load_net(2, wrong, 6)  # refused where it is called, nothing pending for net 2
        res = eng.submit(b, np.ones(12, np.int16)).result(60)
        assert (res.versions == 5).all()
        with torch.no_grad():
            ref = reference(weights(5)).act(batch_obs(b))
        assert np.allclose(res.value, ref.value.numpy(), atol=1e-5)
        # a load that fails on the worker (a device error there): the others are applied
        eng.load_net(1, weights(7), 7)
        with eng._lock:
            eng._pending[2] = ({"not a weight": torch.zeros(1)}, 8, None)
            eng._requested[2] = 8
        with pytest.raises(ValueError, match="net 2"):
            eng.submit(b, np.ones(12, np.int16)).result(60)
        assert eng.versions[1] == 7 and eng.versions[2] == -1
        with pytest.raises(ValueError, match=r"nets \[2\] .* never loaded"):
            eng.submit(b, np.full(12, 2, np.int16))
        assert (eng.submit(b, np.ones(12, np.int16)).result(60).versions == 7).all()


def test_a_round_that_fails_changes_no_gru_state():
    """A round whose second net fails left the first net's rows stepped."""
    cfg = NetConfig(**{**CFG.__dict__, "gru": True})
    eng = InferenceEngine(SPEC, cfg, n_nets=2, max_rows=64, n_table_rows=64)
    rng = np.random.default_rng(1)
    nets = (np.arange(40) % 2).astype(np.int16)
    with eng:
        eng.load_net(1, eng.nets[0].state_dict(), 1)
        eng.submit(synthetic_batch(SPEC, 40, rng, n_table_rows=64), nets).result(60)
        before = eng._state.clone()
        act = eng.nets[1].act

        def fail(*a, **k):
            raise RuntimeError("net 1 failed")

        eng.nets[1].act = fail
        with pytest.raises(RuntimeError, match="net 1 failed"):
            eng.submit(synthetic_batch(SPEC, 40, rng, n_table_rows=64), nets).result(60)
        assert torch.equal(eng._state, before)
        eng.nets[1].act = act
        eng.submit(synthetic_batch(SPEC, 40, rng, n_table_rows=64), nets).result(60)
        assert not torch.equal(eng._state, before)


@pytest.mark.parametrize("device", DEVICES)
def test_a_greedy_twin_answers_by_the_argmax_of_the_current_policy(device):
    """greedy_twin (evaluation.greedy): a last net that publish() loads with net 0 and
    that answers each head's most likely allowed choice; net 0 still samples."""
    eng = InferenceEngine(SPEC, CFG, n_nets=2, max_rows=64, device=device, greedy_twin=True)
    assert eng.greedy_net == 2 and eng.n_nets == 3
    eng.start()
    try:
        rng = np.random.default_rng(5)
        b = synthetic_batch(SPEC, 48, rng)
        obs = batch_obs(b)
        for seed in (1, 2):  # the twin follows each new current policy
            sd = weights(seed)
            eng.publish(sd, seed)
            twin = np.full(48, eng.greedy_net, np.int16)
            res = eng.submit(b, twin).result()
            with torch.no_grad():
                want = reference(sd).act(obs, greedy=True).actions.numpy()
            assert (res.actions == want).all() and (res.versions == seed).all()
            again = eng.submit(b, twin).result()
            assert (again.actions == res.actions).all()  # no sampling: the same rows, the same answers
        sampled = [eng.submit(b, np.zeros(48, np.int16)).result().actions for _ in range(3)]
        assert any((s != want).any() for s in sampled)  # net 0 samples
    finally:
        eng.stop()
