"""Checkpoints resume exactly; a write that fails halfway leaves the previous one valid;
the league snapshots, samples and resumes."""

import numpy as np
import pytest
import torch

from w3async import checkpoint, layout
from w3async.checkpoint import load_latest, save_checkpoint
from w3async.league import League, LeagueConfig, OpponentSlots
from w3async.learner import Learner, LearnerConfig
from w3async.network import NetConfig, Network
from w3async.spec import GameSpec

from .test_learner import fake_batch

torch.set_num_threads(1)  # shared 2-core machine: OpenMP's spinning threads slow small calls

SPEC = GameSpec("t", n_types=3, head_sizes=(4, 2, 2, layout.E_MAX), pointer_head=3)
NET = NetConfig(d_model=16, n_heads=2, n_layers=1)


def trained(tmp_path, updates=2):
    torch.manual_seed(0)
    learner = Learner(Network(SPEC, NET), LearnerConfig(minibatch_seqs=4))
    league = League(tmp_path, LeagueConfig(snapshot_every=1, latest_share=0.3, seed=5))
    for i in range(updates):
        learner.run_update(fake_batch(n_seq=8, seed=i))
        league.maybe_snapshot(learner.version, learner.net.state_dict())
    league.sample_opponent()  # move the sampler's state
    return learner, league


def save(tmp_path, learner, league, steps):
    return save_checkpoint(tmp_path, learner=learner.state_dict(), counters={"agent_steps": steps, "episodes": 7},
                           league=league.state_dict(), recipe={"learner": {"lr": 3e-4}, "name": "fgself"})


def test_resume_is_exact(tmp_path):
    learner, league = trained(tmp_path)
    save(tmp_path, learner, league, steps=1234)
    ckpt = load_latest(tmp_path)
    torch.manual_seed(99)  # a fresh process would not share the old one's init
    learner2 = Learner(Network(SPEC, NET), LearnerConfig(minibatch_seqs=4))
    learner2.load_state_dict(ckpt["learner"])
    league2 = League(tmp_path, LeagueConfig(snapshot_every=1, latest_share=0.3, seed=0))
    league2.load_state_dict(ckpt["league"])
    assert ckpt["counters"] == {"agent_steps": 1234, "episodes": 7}
    assert ckpt["recipe"]["name"] == "fgself"
    assert learner2.version == learner.version == 2
    for k, v in learner.net.state_dict().items():
        assert torch.equal(v, learner2.net.state_dict()[k]), k
    assert league2.snapshots == league.snapshots
    # the optimizer, the minibatch order and the league's sampler continue identically
    tb = fake_batch(n_seq=8, seed=42)
    s1, s2 = learner.run_update(tb), learner2.run_update(tb)
    assert s1.pg_loss == s2.pg_loss
    for k, v in learner.net.state_dict().items():
        assert torch.equal(v, learner2.net.state_dict()[k]), k
    assert [league.sample_opponent() for _ in range(20)] == [league2.sample_opponent() for _ in range(20)]


def test_a_write_that_fails_halfway_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    learner, league = trained(tmp_path, updates=1)
    first = save(tmp_path, learner, league, steps=1)
    learner.run_update(fake_batch(n_seq=8, seed=3))

    def half_then_fail(obj, f):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(checkpoint, "_dump", half_then_fail)
    with pytest.raises(OSError, match="simulated"):
        save(tmp_path, learner, league, steps=2)
    monkeypatch.undo()
    ckpt = load_latest(tmp_path)
    assert ckpt["path"] == str(first) and ckpt["counters"]["agent_steps"] == 1
    assert not list((tmp_path / "checkpoints").glob(".*tmp*")), "the temporary file was left behind"
    # a pointer write that fails leaves `latest` on the previous checkpoint too
    real_write = checkpoint.atomic_write

    def fail_pointer(path, write):
        if path.name == checkpoint.POINTER:
            raise OSError("pointer (simulated)")
        real_write(path, write)

    monkeypatch.setattr(checkpoint, "atomic_write", fail_pointer)
    with pytest.raises(OSError, match="pointer"):
        save(tmp_path, learner, league, steps=3)
    monkeypatch.undo()
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == first.name
    assert load_latest(tmp_path)["counters"]["agent_steps"] == 1


def test_load_latest_falls_back_and_a_fresh_run_has_none(tmp_path):
    assert load_latest(tmp_path) is None
    learner, league = trained(tmp_path, updates=1)
    p = save(tmp_path, learner, league, steps=5)
    (tmp_path / "checkpoints" / "latest").write_text("ckpt-99999999.pt\n")  # names nothing
    assert load_latest(tmp_path)["path"] == str(p)
    p.write_bytes(b"garbage")
    with pytest.raises(RuntimeError, match="no checkpoint loads"):
        load_latest(tmp_path)


def test_league_snapshots_and_samples(tmp_path):
    league = League(tmp_path, LeagueConfig(snapshot_every=5, latest_share=0.25, seed=1))
    net = Network(SPEC, NET)
    assert league.sample_opponent() is None  # empty league: the current policy
    for v in range(1, 21):
        league.maybe_snapshot(v, net.state_dict())
    assert [s.version for s in league.snapshots] == [5, 10, 15, 20]
    assert sorted(p.name for p in (tmp_path / "league").glob("snap-*.pt")) == [s.file for s in league.snapshots]
    picks = [league.sample_opponent() for _ in range(2000)]
    share_latest = sum(p is None for p in picks) / len(picks)
    assert 0.2 < share_latest < 0.3
    sd = league.load(league.snapshots[0])
    assert all(torch.equal(sd[k], v) for k, v in net.state_dict().items())


def test_opponent_slots_reuse_and_evict():
    loads = []
    slots = OpponentSlots(2, lambda s, sd, v: loads.append((s, v)))
    a = slots.acquire(10, dict)
    b = slots.acquire(10, dict)
    c = slots.acquire(20, dict)
    assert (a, b, c) == (1, 1, 2) and loads == [(1, 10), (2, 20)]
    assert slots.acquire(30, dict) is None  # both slots in use
    slots.release(2)
    assert slots.acquire(30, dict) == 2 and loads[-1] == (2, 30)
    with pytest.raises(ValueError):
        slots.release(2) or slots.release(2)
    assert np.sum(slots.users) == 2
