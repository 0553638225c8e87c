"""Every checkpoint and league snapshot carries a digest checked at each
load; a file that fails is refused naming it, an older good checkpoint is taken only when
asked (checkpoint.fallback), weights with NaN or infinity are refused, and nothing from a
refused file is ever saved."""

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from w3async.learn import checkpoint
from w3async.learn.checkpoint import CheckpointLoadError, load_latest, read_file
from w3async.learn.league import League, LeagueConfig
from w3async.learn.learner import Learner, LearnerConfig
from w3async.learn.network import Network
from w3async.learn.resume import restore
from w3async.learn.tallies import EpisodeTally
from w3async.runtime.answerer import Counters

from tests.learn.test_checkpoint import NET, SPEC, save, trained

torch.set_num_threads(1)

N_OFFSETS = 20


def _flips(n_bytes: int, seed: int) -> list[tuple[int, int]]:
    """20 (offset, xor mask) pairs over the whole file, the header's bytes included."""
    rng = np.random.default_rng(seed)
    offsets = sorted(set(int(x) for x in rng.integers(0, n_bytes, 4 * N_OFFSETS)))
    picked = [offsets[i] for i in rng.choice(len(offsets), N_OFFSETS, replace=False)]
    picked[:3] = [0, len(checkpoint.MAGIC), n_bytes - 1]  # the magic, the digest, the last byte
    return [(o, int(rng.integers(1, 256))) for o in picked]


def test_a_checkpoint_changed_at_any_byte_is_refused_naming_it(tmp_path):
    """A byte flipped at 20 seeded offsets (the magic, the digest and the zip's every part
    among them): each refused, the error naming the file, never loaded."""
    learner, league = trained(tmp_path, updates=2)
    p = save(tmp_path, learner, league, steps=5)
    whole = p.read_bytes()
    assert whole.startswith(checkpoint.MAGIC)
    assert load_latest(tmp_path)["counters"]["agent_steps"] == 5
    for off, mask in _flips(len(whole), seed=25):
        bad = bytearray(whole)
        bad[off] ^= mask
        p.write_bytes(bytes(bad))
        with pytest.raises(CheckpointLoadError) as e:
            load_latest(tmp_path)
        assert e.value.path == str(p), (off, e.value)
        assert "truncated or corrupt" in e.value.cause or "not a readable checkpoint" in e.value.cause, (off, e.value)
    p.write_bytes(whole)  # the file as written loads again
    assert load_latest(tmp_path)["counters"]["agent_steps"] == 5


def test_a_league_snapshot_changed_at_any_byte_is_refused_naming_it(tmp_path):
    """The same flips in a league snapshot: a resume's check of the league and a lane's
    load of an opponent both refuse it, naming the snapshot; the league is not changed."""
    learner, league = trained(tmp_path, updates=2)
    snap = league.snapshots[-1]
    path = tmp_path / "league" / snap.file
    whole = path.read_bytes()
    sd = league.state_dict()
    for off, mask in _flips(len(whole), seed=26):
        bad = bytearray(whole)
        bad[off] ^= mask
        path.write_bytes(bytes(bad))
        fresh = League(tmp_path, LeagueConfig(snapshot_every=1, latest_share=0.3, seed=0))
        with pytest.raises(CheckpointLoadError, match=rf"{snap.file}: league snapshot of version {snap.version}: "):
            fresh.load_state_dict(sd)
        assert fresh.snapshots == []
        with pytest.raises(CheckpointLoadError) as e:
            league.load(snap)
        assert e.value.path == str(path)
    path.write_bytes(whole)
    assert set(league.load(snap)) == set(learner.net.state_dict())


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_weights_that_are_not_finite_are_refused_at_load(tmp_path, value):
    """A checkpoint (its digest sound: the weights were bad when written) and a snapshot
    whose one weight is NaN or infinite: refused, naming the file and the tensor."""
    learner, league = trained(tmp_path, updates=1)
    sd = learner.state_dict()
    name = next(iter(sd["net"])) if "net" in sd else None
    assert name is not None, list(sd)
    sd["net"][name] = sd["net"][name].clone()
    sd["net"][name].view(-1)[0] = value
    checkpoint.save_checkpoint(tmp_path, learner=sd, counters={}, league=league.state_dict(), recipe={})
    with pytest.raises(CheckpointLoadError, match=rf"ckpt-00000001.pt: a weight is not finite \(learner.net.{name}: "):
        load_latest(tmp_path)
    snap = tmp_path / "league" / "snap-bad.pt"
    checkpoint.atomic_save({name: sd["net"][name]}, snap)
    with pytest.raises(CheckpointLoadError, match=rf"snap-bad.pt: a weight is not finite \({name}: "):
        read_file(snap)


def test_a_file_without_a_digest_is_refused_unless_trusted(tmp_path, capsys, monkeypatch):
    """A checkpoint written before digests (torch.save alone): refused, naming the flag
    that loads it (before: loaded with a console warning only, then saved again under a
    valid digest); trusted (--trust-undigested), loaded with one warning line on stderr
    naming it, marked `digested: False`; its weights still checked."""
    learner, league = trained(tmp_path, updates=1)
    p = save(tmp_path, learner, league, steps=3)
    buf = io.BytesIO()
    torch.save(torch.load(io.BytesIO(p.read_bytes()[checkpoint.HEADER_LEN:]), weights_only=True), buf)
    p.write_bytes(buf.getvalue())
    with pytest.raises(CheckpointLoadError, match=r"has no digest .* refused; pass --trust-undigested"):
        load_latest(tmp_path)
    monkeypatch.setitem(checkpoint._trust, "undigested", True)
    ckpt = load_latest(tmp_path)
    assert ckpt["counters"]["agent_steps"] == 3 and ckpt["digested"] is False
    err = capsys.readouterr().err
    assert f"{p} has no digest" in err and err.count("\n") == 1, err


def test_a_checkpoint_of_another_run_is_refused_at_resume_and_named_by_eval(tmp_path):
    """Run B's checkpoint copied into run A's folder (as latest, and as best.pt): a resume
    of A refuses it naming both run ids (before: resumed as A's); `eval A` names it
    (before: it evaluated B's policy as A's). A's own checkpoint passes both."""
    import shutil

    from w3async.learn.eval_policy import EvalError, load_policy

    a, b = tmp_path / "a", tmp_path / "b"
    learner, league = trained(a, updates=1)
    own = save(a, learner, league, steps=3)
    other = save(b, *trained(b, updates=1), steps=5)
    assert checkpoint.run_id(a) and checkpoint.run_id(a) != checkpoint.run_id(b)
    restore(a, *_fresh(a))  # its own: loads
    swapped = own.parent / "ckpt-99999999.pt"
    shutil.copy(other, swapped)
    (own.parent / checkpoint.POINTER).write_text(swapped.name + "\n")
    with pytest.raises(CheckpointLoadError, match=rf"{swapped.name}: a checkpoint of another run \(run id "
                                                  rf"{checkpoint.run_id(b)}.*run id {checkpoint.run_id(a)}"):
        restore(a, *_fresh(a))
    best = own.parent / checkpoint.BEST_PT
    shutil.copy(other, best)
    with pytest.raises(EvalError, match="a checkpoint of another run"):
        load_policy(best)
    ckpt = checkpoint.load_checkpoint(own)
    assert checkpoint.foreign(ckpt, a) is None and "of the game 'duel'" in checkpoint.foreign(
        {**ckpt, "recipe": {"game": "duel"}}, a, game="null")


def _fresh(tmp_path):
    torch.manual_seed(7)
    learner = Learner(Network(SPEC, NET), LearnerConfig(minibatch_seqs=4))
    league = League(tmp_path, LeagueConfig(snapshot_every=1, latest_share=0.3, seed=0))
    return learner, league, Counters(), EpisodeTally(4, 10)


def test_an_older_checkpoint_is_taken_only_when_asked(tmp_path):
    """The latest checkpoint corrupt: refused without checkpoint.fallback; with it, the
    newest one that passes is loaded whole (weights equal to that file's), the refused
    one named; with none passing, one error naming each."""
    from tests.learn.test_learner import fake_batch

    learner, league = trained(tmp_path, updates=1)
    older = save(tmp_path, learner, league, steps=10)
    good = {k: v.clone() for k, v in learner.net.state_dict().items()}
    learner.run_update(fake_batch(n_seq=8, seed=9))
    latest = save(tmp_path, learner, league, steps=20)
    whole = bytearray(latest.read_bytes())
    whole[len(whole) // 2] ^= 0x40
    latest.write_bytes(bytes(whole))

    with pytest.raises(CheckpointLoadError, match=rf"{latest.name}: truncated or corrupt"):
        restore(tmp_path, *_fresh(tmp_path))
    l2, lg2, counters, tally = _fresh(tmp_path)
    ckpt = restore(tmp_path, l2, lg2, counters, tally, fallback=True)
    assert ckpt["path"] == str(older) and counters.agent_steps == 10
    assert [r["path"] for r in ckpt["refused"]] == [str(latest)]
    assert all(torch.equal(v, good[k]) for k, v in l2.net.state_dict().items())
    older.write_bytes(older.read_bytes()[:-1])
    with pytest.raises(CheckpointLoadError, match=rf"{latest.name}: truncated or corrupt.* no older checkpoint loads "
                                                  rf"either \(.*{older.name}: truncated or corrupt"):
        restore(tmp_path, *_fresh(tmp_path), fallback=True)


async def test_a_run_resumes_from_an_older_checkpoint_only_when_asked(tmp_path, null_native):
    """A real run whose latest checkpoint got 4 KiB of random bytes inside: refused (the
    run stops before it writes anything); with checkpoint.fallback = true it resumes from
    the older one, says so in its `resume` record, and its later checkpoints load (the
    refused file's weights were never loaded, so never saved)."""
    from w3async.recipes import recipe_from_dict
    from w3async import compose
    from w3async.runtime.supervisor import RunError

    from tests.runtime.test_supervisor import events
    from tests.learn.test_training import learn_recipe

    run_dir = tmp_path / "run"
    data = learn_recipe(count=2, stop={"updates": 4, "seconds": 120}, league={"snapshot_every": 2},
                        status={"enabled": False})
    await compose.supervisor(recipe_from_dict(data), run_dir).run()
    ckpts = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert len(ckpts) >= 2
    bad = Path(load_latest(run_dir)["path"])
    whole = bytearray(bad.read_bytes())
    whole[len(whole) // 2 : len(whole) // 2 + 4096] = np.random.default_rng(25).bytes(4096)
    bad.write_bytes(bytes(whole))
    data["stop"] = {"updates": 8, "seconds": 120}
    with pytest.raises(RunError, match=rf"{bad.name}: truncated or corrupt: its digest does not match"):
        await compose.supervisor(recipe_from_dict(data), run_dir).run()
    data["checkpoint"]["fallback"] = True
    await compose.supervisor(recipe_from_dict(data), run_dir).run()
    resumes = [e for e in events(run_dir) if e["event"] == "resume"]
    assert resumes and [r["path"] for r in resumes[-1]["refused"]] == [str(bad)]
    assert resumes[-1]["checkpoint"] != str(bad)
    after = load_latest(run_dir)
    assert after["learner"]["version"] >= 8
    for p in sorted((run_dir / "checkpoints").glob("ckpt-*.pt")):
        checkpoint.load_checkpoint(p)  # every file the resumed run left passes its checks
    json.dumps(resumes[-1])


async def test_a_run_resumes_from_an_undigested_checkpoint_only_when_trusted(tmp_path, null_native, monkeypatch):
    """A real run's latest checkpoint stripped of its digest: the resume stops before it
    writes anything, naming --trust-undigested; trusted, it resumes, records a
    `checkpoint_undigested` event (before: a console line only), and what it writes
    after carries a digest of its own."""
    from w3async import compose
    from w3async.recipes import recipe_from_dict
    from w3async.runtime.supervisor import RunError

    from tests.runtime.test_supervisor import events
    from tests.learn.test_training import learn_recipe

    run_dir = tmp_path / "run"
    data = learn_recipe(count=2, stop={"updates": 2, "seconds": 120}, status={"enabled": False})
    await compose.supervisor(recipe_from_dict(data), run_dir).run()
    latest = Path(load_latest(run_dir)["path"])
    latest.write_bytes(latest.read_bytes()[checkpoint.HEADER_LEN:])  # torch.save's zip alone
    data["stop"] = {"updates": 4, "seconds": 120}
    with pytest.raises(RunError, match=rf"{latest.name}: has no digest .*--trust-undigested"):
        await compose.supervisor(recipe_from_dict(data), run_dir).run()
    monkeypatch.setitem(checkpoint._trust, "undigested", True)
    await compose.supervisor(recipe_from_dict(data), run_dir).run()
    marks = [e for e in events(run_dir) if e["event"] == "checkpoint_undigested"]
    assert len(marks) == 1 and marks[0]["path"] == str(latest), marks
    after = Path(load_latest(run_dir)["path"])
    assert after != latest and after.read_bytes()[: len(checkpoint.MAGIC)] == checkpoint.MAGIC
