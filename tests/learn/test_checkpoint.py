"""Checkpoints resume exactly; a write that fails halfway leaves the previous one valid;
the league snapshots, samples and resumes."""

import errno
import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from w3async import compose
from w3async.learn import checkpoint
from w3async.sync import layout
from w3async.learn.checkpoint import CheckpointLoadError, CheckpointWriteError, load_latest, save_checkpoint
from w3async.learn.league import League, LeagueConfig, OpponentNets
from w3async.learn.learner import Learner, LearnerConfig
from w3async.learn.network import NetConfig, Network
from w3async.games.spec import GameSpec

from tests.learn.test_learner import fake_batch

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
    with pytest.raises(CheckpointWriteError, match="ckpt-00000002.pt: .*simulated"):
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


def test_load_latest_never_falls_back_behind_a_bad_latest(tmp_path):
    """A checkpoint that `latest` names must load, or the error names the
    file and the cause (an older checkpoint is never taken in its place)."""
    assert load_latest(tmp_path) is None
    learner, league = trained(tmp_path, updates=1)
    p = save(tmp_path, learner, league, steps=5)
    (tmp_path / "checkpoints" / "latest").write_text("ckpt-99999999.pt\n")  # names nothing
    with pytest.raises(CheckpointLoadError, match=r"ckpt-99999999.pt: No such file or directory \[ENOENT\]"):
        load_latest(tmp_path)
    (tmp_path / "checkpoints" / "latest").unlink()  # no pointer: the newest checkpoint
    assert load_latest(tmp_path)["path"] == str(p)
    p.write_bytes(b"garbage")
    with pytest.raises(CheckpointLoadError, match="ckpt-00000001.pt: not a readable checkpoint"):
        load_latest(tmp_path)


def test_a_league_snapshot_missing_or_corrupt_is_a_clear_error(tmp_path):
    learner, league = trained(tmp_path, updates=3)
    sd = league.state_dict()
    files = [tmp_path / "league" / s.file for s in league.snapshots]
    files[1].unlink()
    fresh = League(tmp_path, LeagueConfig(snapshot_every=1, latest_share=0.3, seed=0))
    with pytest.raises(CheckpointLoadError, match=rf"{files[1].name}: league snapshot of version 2: .*ENOENT"):
        fresh.load_state_dict(sd)
    assert fresh.snapshots == []  # nothing taken from a league that does not load
    files[1].write_bytes(files[0].read_bytes()[:100])  # truncated
    with pytest.raises(CheckpointLoadError, match=rf"{files[1].name}: league snapshot of version 2"):
        fresh.load_state_dict(sd)


def test_a_truncated_checkpoint_says_truncated_never_invalid_argument(tmp_path):
    """torch.load raises OSError EINVAL for a zip cut inside its central directory: a resume
    or `eval` of a checkpoint cut short by a full disk or a copy said only "Invalid argument
    [EINVAL]" (2026-12-02). Cut at every kind of place (the first bytes, a record, the
    central directory, the last byte), a checkpoint or a league snapshot says it does not
    read, and why; a folder in a checkpoint's place is the OSError it is."""
    learner, league = trained(tmp_path, updates=3)
    p = save(tmp_path, learner, league, steps=5)
    whole = p.read_bytes()
    causes = {}
    for n in (0, 10, 100, len(whole) // 2, len(whole) - 200, len(whole) - 1):
        p.write_bytes(whole[:n])
        with pytest.raises(CheckpointLoadError) as e:
            load_latest(tmp_path)
        assert e.value.path == str(p)
        causes[n] = e.value.cause
    # the digest finds a cut first: "truncated" (the header itself cut) or "truncated or corrupt"
    assert all(c.startswith("truncated") for c in causes.values()), causes
    p.unlink()
    p.mkdir()
    with pytest.raises(CheckpointLoadError, match=rf"{p.name}: Is a directory \[EISDIR\]"):
        load_latest(tmp_path)
    snap = tmp_path / "league" / league.snapshots[-1].file
    snap.write_bytes(snap.read_bytes()[:-1])
    fresh = League(tmp_path, LeagueConfig(snapshot_every=1, latest_share=0.3, seed=0))
    with pytest.raises(CheckpointLoadError, match=rf"{snap.name}: league snapshot of version 3: truncated or "
                                                  "corrupt: its digest does not match"):
        fresh.load_state_dict(league.state_dict())


def test_a_checkpoint_folder_that_is_a_file_is_a_clear_write_error(tmp_path):
    learner, league = trained(tmp_path, updates=1)
    (tmp_path / "checkpoints").write_bytes(b"not a folder")
    with pytest.raises(CheckpointWriteError, match="checkpoints: File exists") as e:
        save(tmp_path, learner, league, steps=1)
    assert e.value.errno == errno.EEXIST
    assert (tmp_path / "checkpoints").read_bytes() == b"not a folder"


def test_a_full_disk_is_a_write_error_and_the_previous_checkpoint_is_byte_identical(tmp_path):
    """A real write failure: in a child process with RLIMIT_FSIZE below a checkpoint's size
    (SIGXFSZ ignored, as a supervisor must), write() fails with EFBIG as on a full disk.
    The error is a CheckpointWriteError naming the file and the cause, no temporary file
    is left, and the previous checkpoint and `latest` are byte for byte what they were."""
    script = textwrap.dedent(f"""
        import resource, signal, sys, errno
        import torch
        from w3async.learn.checkpoint import CheckpointWriteError, save_checkpoint
        torch.set_num_threads(1)
        run = sys.argv[1]
        big = {{"w": torch.zeros(256 * 1024)}}  # 1 MiB of weights
        def save(version):
            return save_checkpoint(run, learner={{"version": version, "net": big}}, counters={{"agent_steps": version}},
                                   league={{"snapshots": []}}, recipe={{}})
        import hashlib, pathlib
        save(1)
        ck = pathlib.Path(run) / "checkpoints"
        print("BEFORE", hashlib.sha256((ck / "ckpt-00000001.pt").read_bytes() + (ck / "latest").read_bytes()).hexdigest())
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
        try:
            save(2)
        except CheckpointWriteError as e:
            print("ERR", e.errno == errno.EFBIG, e)
            sys.exit(0)
        print("NO ERROR")
        sys.exit(1)
    """)
    first = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                           cwd=tmp_path, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert first.returncode == 0, first.stdout + first.stderr
    before, err = first.stdout.splitlines()
    assert err.startswith("ERR True cannot write ") and err.endswith("ckpt-00000002.pt: File too large [EFBIG]"), err
    ck = tmp_path / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["ckpt-00000001.pt", "latest"]  # no temporary file left
    after = hashlib.sha256((ck / "ckpt-00000001.pt").read_bytes() + (ck / "latest").read_bytes()).hexdigest()
    assert before == f"BEFORE {after}"
    assert load_latest(tmp_path)["counters"] == {"agent_steps": 1}


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


def test_opponent_nets_reuse_and_evict():
    loads = []
    nets = OpponentNets(2, lambda s, sd, v: loads.append((s, v)))
    a = nets.acquire(10, dict)
    b = nets.acquire(10, dict)
    c = nets.acquire(20, dict)
    assert (a, b, c) == (1, 1, 2) and loads == [(1, 10), (2, 20)]
    assert nets.acquire(30, dict) is None  # both nets in use
    nets.release(2)
    assert nets.acquire(30, dict) == 2 and loads[-1] == (2, 30)
    with pytest.raises(ValueError):
        nets.release(2) or nets.release(2)
    assert np.sum(nets.users) == 2


# ---- a real run: resume, a killed run's logs, a full disk ------------------------------


def _tree_bytes(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage", ["missing_snapshot", "corrupt_checkpoint", "random_bytes_inside", "other_network"])
async def test_a_resume_that_cannot_load_everything_stops_before_writing(tmp_path, null_native, damage):
    """A resume whose league snapshot is missing (or whose latest checkpoint
    is corrupt) stops with one error naming the file and the cause, before anything of the
    learning side is written: the checkpoints, the league and the logs stay byte-identical
    (they were overwritten with zeroed counters), and so does recipe.json (it was replaced
    by the refused recipe, here one with another stop, until 2026-12-02)."""
    from w3async.recipes import recipe_from_dict
    from w3async.runtime.supervisor import RunError

    from w3async.sync.table import list_segments

    from tests.runtime.test_supervisor import events
    from tests.learn.test_training import learn_recipe

    run_dir = tmp_path / "run"
    data = learn_recipe(count=2, stop={"updates": 4, "seconds": 120}, league={"snapshot_every": 2},
                        status={"enabled": False})
    await compose.supervisor(recipe_from_dict(data), run_dir).run()
    ckpt = load_latest(run_dir)
    assert ckpt["learner"]["version"] >= 4 and len(ckpt["league"]["snapshots"]) >= 2
    if damage == "missing_snapshot":
        bad = run_dir / "league" / ckpt["league"]["snapshots"][0]["file"]
        bad.unlink()
        cause = "No such file or directory"
    elif damage == "corrupt_checkpoint":
        bad = Path(ckpt["path"])
        bad.write_bytes(bad.read_bytes()[:1000])
        cause = "truncated or corrupt"
    elif damage == "random_bytes_inside":  # a sound zip otherwise, loaded without a word until then
        bad = Path(ckpt["path"])
        whole = bytearray(bad.read_bytes())
        mid = len(whole) // 2
        whole[mid : mid + 4096] = np.random.default_rng(25).bytes(4096)
        bad.write_bytes(bytes(whole))
        cause = "its digest does not match"
    else:  # the recipe's network changed: its first mismatch, not torch's paragraph of all of them
        bad = Path(ckpt["path"])
        data["network"] = dict(data["network"], d_model=2 * data["network"]["d_model"])
        cause = r"does not load into this recipe's network \(RuntimeError: Error\(s\) in loading state_dict .* size mismatch"
    before = {d: _tree_bytes(run_dir / d) for d in ("checkpoints", "league")}
    logs = {n: (run_dir / n).read_bytes() for n in ("learner.jsonl", "episodes.jsonl", "inference.jsonl", "recipe.json")}
    data["stop"] = {"updates": 8, "seconds": 120}
    sup = compose.supervisor(recipe_from_dict(data), run_dir)
    with pytest.raises(RunError, match=rf"{bad.name}: .*{cause}") as e:
        await sup.run()
    assert "\n" not in str(e.value) and len(str(e.value)) < 600, str(e.value)
    assert {d: _tree_bytes(run_dir / d) for d in ("checkpoints", "league")} == before
    assert {n: (run_dir / n).read_bytes() for n in logs} == logs
    assert sup.answerer is None  # refused as it was made: no engine, no learner thread, no last checkpoint
    assert not [e for e in events(run_dir) if e["event"] == "game_start" and e["ts"] > ckpt_time(ckpt)]
    shutdown = [e for e in events(run_dir) if e["event"] == "shutdown"]
    assert len(shutdown) == 2 and bad.name in shutdown[-1]["error"]
    assert shutdown[-1]["leftovers"]["processes"] == []
    assert not [s for s in list_segments() if s.startswith(sup.table.name)]


def ckpt_time(ckpt: dict) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ckpt["saved_at"], datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


FULL_DISK_DRIVER = textwrap.dedent("""
    import asyncio, hashlib, json, resource, signal, sys
    from pathlib import Path
    from w3async import compose
    from w3async.recipes import recipe_from_dict
    from w3async.runtime.supervisor import RunError

    data, run_dir, limit = json.loads(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write over the limit fails with EFBIG instead
    out = {}

    def digest():  # every checkpoint file and `latest` (not a temporary file being written)
        ck = run_dir / "checkpoints"
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(ck.iterdir())
                if not p.name.startswith(".")}

    async def arm():  # the disk fills up once the first checkpoint is written (on the loop: never starved)
        latest = run_dir / "checkpoints" / "latest"
        while not latest.exists():
            await asyncio.sleep(0.01)
        size = (run_dir / "checkpoints" / latest.read_text().strip()).stat().st_size
        out["limit"] = cap = min(limit, size // 2)  # below a checkpoint's size, whatever the network's
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, resource.RLIM_INFINITY))
        await asyncio.sleep(0.2)  # a write that began before the limit has ended; any later one fails
        out["good"] = digest()

    async def main():
        sup = compose.supervisor(recipe_from_dict(data), run_dir)
        armer = asyncio.create_task(arm())
        try:
            await sup.run()
            out["raised"] = None
        except Exception as e:
            out["raised"], out["error"] = type(e).__name__, str(e)
        try:
            await asyncio.wait_for(armer, 5)
        except asyncio.TimeoutError:
            out["armed"] = False
        out["failure"] = sup.answerer.failure if sup.answerer is not None else None

    asyncio.run(main())
    out["after"] = digest()
    print(json.dumps(out))
""")



def test_a_full_checkpoint_disk_ends_the_run_cleanly_with_the_last_checkpoint_intact(tmp_path, null_native):
    """The checkpoint disk fills up mid-run (a real EFBIG: RLIMIT_FSIZE
    below a checkpoint's size in the supervisor's process, SIGXFSZ ignored). The learner's
    checkpoint fails with a typed error that reaches the supervisor as the run's cause
    (Training.failure), the last checkpoint fails the same way without a traceback, the
    run ends with one error and a shutdown record, nothing is left, and the checkpoint
    written before the disk filled is byte-identical, `latest` still naming it."""
    import json

    from w3async.sync.table import list_segments

    from tests.runtime.test_supervisor import events
    from tests.learn.test_training import learn_recipe

    run_dir = tmp_path / "run"
    data = learn_recipe(count=2, stop={"seconds": 120}, status={"enabled": False})
    r = subprocess.run([sys.executable, "-c", FULL_DISK_DRIVER, json.dumps(data), str(run_dir), str(128 * 1024)],
                       cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    ev = events(run_dir)
    assert out["raised"] == "RunError", (out, [e for e in ev if not e["event"].startswith("game_")], r.stderr[-2000:])
    assert "checkpoint write failed: cannot write" in out["error"] and "File too large [EFBIG]" in out["error"], out
    assert out["failure"].startswith("checkpoint write failed: cannot write "), out
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert out["after"] == out["good"]  # every checkpoint file and `latest`, byte for byte
    ck = run_dir / "checkpoints"
    assert load_latest(run_dir)["path"] == str(ck / (ck / "latest").read_text().strip())
    assert not [p for d in ("checkpoints", "league") for p in (run_dir / d).iterdir() if ".tmp-" in p.name]
    ev = events(run_dir)
    failed = [e for e in ev if e["event"] == "learner_failed"]
    assert len(failed) == 1 and failed[0]["cause"] == "checkpoint_write" and failed[0]["errno"] == errno.EFBIG
    assert "traceback" not in failed[0]
    shutdown = [e for e in ev if e["event"] == "shutdown"]
    assert len(shutdown) == 1 and "EFBIG" in shutdown[0]["error"] and shutdown[0]["leftovers"]["processes"] == []
    shm = [e for e in ev if e["event"] == "run_start"][0]["shm"]
    assert not [s for s in list_segments() if s.startswith(shm)]
