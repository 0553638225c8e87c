"""Replay parity: a 600-step replay plays back identically with every cut bit off and on,
natively and under Wine; the test-only bit is caught at its step in the right field; a
corrupted or truncated replay, a crashing and a hanging variant are reported."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from w3async.games.duel import parity as rp
from w3async.games.duel.replay import ReplayError, read_replay

from tests.conftest import need

REPO = Path(__file__).resolve().parents[2]
DUEL = REPO / "build" / "native" / "duel"
DUEL_EXE = REPO / "build" / "win64" / "duel.exe"


@pytest.fixture(scope="module")
def long_replay(tmp_path_factory) -> Path:
    """hard vs hard on the camps map, seed 3: a full 600-step game to the time limit,
    with the full state per step (so the recording itself is compared unit by unit)."""
    subprocess.run(["make", "-s", "-C", "games/duel", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    path = tmp_path_factory.mktemp("replays") / "hard-camps-3.w3dr"
    subprocess.run([str(DUEL), "--record", str(path), "--sides", "ai:hard,ai:hard", "--map", "camps", "--seed", "3",
                    "--states"], check=True, capture_output=True)
    rep = read_replay(path)
    assert len(rep.steps) >= 400 and rep.header.has_states
    return path


def check(path: Path, tmp_path: Path, env: list[str], runtimes=("native",), steps=None, timeout_s=120.0, prefix=None):
    variants = rp.make_variants(list(runtimes), rp.parse_env(env))
    return rp.check_replay(path, variants, steps, timeout_s, tmp_path, log=lambda s: None, wine_prefix=prefix)


def test_cut_bits_leave_the_simulation_identical(long_replay, tmp_path):
    res = check(long_replay, tmp_path, ["W3D_CUTS=0,1,2,4,7"])
    assert res.verdict == "identical", (res.errors, res.divergences)
    assert res.steps >= 400 and len(res.variants) == 5


@pytest.mark.parametrize("break_step", [200, 57])
def test_the_break_bit_is_caught_at_its_step(long_replay, tmp_path, break_step):
    res = check(long_replay, tmp_path, ["W3D_CUTS=7,135", f"W3D_BREAK_STEP={break_step}"])
    assert not res.errors
    broken = [d for d in res.divergences if "W3D_CUTS=135" in d.variant]
    assert {d.against for d in broken} == {"recording", "native W3D_CUTS=7 W3D_BREAK_STEP=%d" % break_step}
    for d in broken:
        assert d.step == break_step
        assert {f.field for f in d.diffs} == {"hp"}
        assert all(abs(int(f.a) - int(f.b)) == 1 for f in d.diffs)
    assert not [d for d in res.divergences if "W3D_CUTS=7 " in d.variant + " "]


def test_cli_exit_status_and_report(long_replay, capsys):
    assert rp.main([str(long_replay), "--env", "W3D_CUTS=0,7", "--steps", "450"]) == rp.EXIT_OK
    out = capsys.readouterr().out
    assert "identical" in out and "450" in out
    assert rp.main([str(long_replay), "--env", "W3D_CUTS=0,128", "--steps", "300"]) == rp.EXIT_DIVERGED
    out = capsys.readouterr().out
    assert "first at step 200" in out and " hp: " in out


def _corrupt(src: Path, dst: Path, offset: int) -> Path:
    data = bytearray(src.read_bytes())
    data[offset] ^= 0x5A
    dst.write_bytes(bytes(data))
    return dst


def test_corrupted_and_truncated_replays_are_named(long_replay, tmp_path):
    bad = _corrupt(long_replay, tmp_path / "bad.w3dr", 20_000)
    with pytest.raises(ReplayError) as e:
        read_replay(bad)
    assert str(bad) in str(e.value) and "offset" in str(e.value) and "crc" in str(e.value)
    assert e.value.offset <= 20_000

    cut = tmp_path / "cut.w3dr"
    cut.write_bytes(long_replay.read_bytes()[:30_001])
    with pytest.raises(ReplayError) as e:
        read_replay(cut)
    assert "truncated" in str(e.value) and str(cut) in str(e.value)

    header = _corrupt(long_replay, tmp_path / "header.w3dr", 33)
    with pytest.raises(ReplayError, match="header crc"):
        read_replay(header)
    with pytest.raises(ReplayError, match="magic"):
        read_replay(_corrupt(long_replay, tmp_path / "magic.w3dr", 0))

    # the game's own reader says the same, and the parity tool exits 2
    p = subprocess.run([str(DUEL), "--play-replay", str(bad), "--dump", str(tmp_path / "x.w3dr")],
                       capture_output=True, text=True)
    assert p.returncode != 0 and "corrupted" in p.stderr and str(bad) in p.stderr
    assert rp.main([str(bad), str(cut)]) == rp.EXIT_BROKEN


def test_a_crashing_or_hanging_variant_is_broken(long_replay, tmp_path, monkeypatch):
    res = check(long_replay, tmp_path, ["W3D_CUTS=0,999"])
    assert res.verdict == "broken"
    assert any("W3D_CUTS=999: exited" in e for e in res.errors), res.errors
    # a game that never ends: the variant is killed at the timeout and reported hung
    hang = tmp_path / "hang.sh"
    hang.write_text("#!/bin/sh\necho progress 50 0\nexec sleep 60\n")
    hang.chmod(0o755)
    monkeypatch.setattr(rp, "NATIVE_EXE", hang)
    t0 = time.monotonic()
    res = check(long_replay, tmp_path, ["W3D_CUTS=0"], timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert res.verdict == "broken" and any("hung" in e and "at step 50" in e for e in res.errors), res.errors


@pytest.mark.wine
def test_wine_plays_the_replay_like_native(long_replay, tmp_path, wine):
    need("duel.exe", DUEL_EXE.exists() and shutil.which("x86_64-w64-mingw32-gcc") is not None,
         "apt-get install gcc-mingw-w64-x86-64, then make build")
    from w3async.runtime.wine import WineConfig, acquire_running_prefix

    with acquire_running_prefix(WineConfig()) as prefix:
        res = check(long_replay, tmp_path, ["W3D_CUTS=0,7"], runtimes=("native", "wine"), timeout_s=240,
                    prefix=prefix)
    assert res.verdict == "identical", (res.errors, res.divergences)
    assert res.steps >= 400 and sum(v.startswith("wine") for v in res.variants) == 2


def _with_crc(data: bytearray, start: int, end: int) -> bytes:
    import struct
    import zlib

    struct.pack_into("<I", data, end, zlib.crc32(bytes(data[start:end])))
    return bytes(data)


def test_a_replay_whose_sizes_lie_is_refused(long_replay, tmp_path, capsys):
    """Sizes that every CRC vouches for but the file does not hold: a header size of
    another layout, an end record claiming more steps than there are (a file cut at a
    record boundary with its end record put back). Both used to compare the steps left
    and exit 0, "identical"."""
    import struct

    data = long_replay.read_bytes()
    n = len(read_replay(long_replay).steps)
    head = bytearray(data)
    struct.pack_into("<I", head, 12, 1 << 30)
    (tmp_path / "hsize.w3dr").write_bytes(_with_crc(head, 0, 60))
    with pytest.raises(ReplayError, match=r"offset 12: header size: is 1073741824, version 1 has 64"):
        read_replay(tmp_path / "hsize.w3dr")
    end = bytearray(data)
    struct.pack_into("<I", end, len(end) - 24, n + 1000)
    (tmp_path / "end.w3dr").write_bytes(_with_crc(end, len(end) - 28, len(end) - 4))
    with pytest.raises(ReplayError, match=rf"end record steps: is {n + 1000}, the file holds {n} step records"):
        read_replay(tmp_path / "end.w3dr")
    (tmp_path / "hdr.w3dr").write_bytes(data[:64])
    with pytest.raises(ReplayError, match="ends after the header without one"):
        read_replay(tmp_path / "hdr.w3dr")
    assert rp.main([str(tmp_path / "hsize.w3dr"), str(tmp_path / "end.w3dr")]) == rp.EXIT_BROKEN
    out = capsys.readouterr().out
    assert "hsize.w3dr: cannot load" in out and "end.w3dr: cannot load" in out and "identical" not in out


@pytest.mark.parametrize("args,says", [
    (["--steps", "0"], "argument --steps: '0': must be a finite number > 0"),
    (["--steps", "-5"], "argument --steps: '-5': must be a finite number > 0"),
    (["--timeout", "nan"], "argument --timeout: 'nan': must be a finite number > 0"),
    (["--env", "=1"], "--env '=1': expected KEY=a,b,..."),
])
def test_bad_options_exit_2_before_anything_runs(long_replay, tmp_path, capsys, args, says):
    """--steps 0 or -5 compared nothing and said "identical" (exit 0), --timeout nan never
    timed out, a malformed --env exited 1 (the status of a divergence)."""
    with pytest.raises(SystemExit) as e:
        rp.main([str(long_replay), "--keep", str(tmp_path / "dumps"), *args])
    err = capsys.readouterr().err
    assert e.value.code == rp.EXIT_BROKEN and says in err and "Traceback" not in err, err
    assert not (tmp_path / "dumps").exists()


def test_a_game_or_keep_folder_that_cannot_be_used_is_one_line(long_replay, tmp_path, capsys, monkeypatch):
    """A --native-exe that is a folder or not executable, a --keep that is a file: these were
    tracebacks with exit status 1 (a divergence's)."""
    keep = tmp_path / "keep"
    keep.write_text("mine")
    for args, says in ((["--native-exe", str(tmp_path)], f"--native-exe {tmp_path} is not a program"),
                       (["--native-exe", str(keep)], f"--native-exe {keep} is not a program"),
                       (["--keep", str(keep)], f"--keep {keep}: cannot keep the dumps there: it is a file")):
        assert rp.main([str(long_replay), *args]) == rp.EXIT_BROKEN
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    assert keep.read_text() == "mine"
    # a game that cannot be started once checked (gone, a process limit): that variant is broken
    monkeypatch.setattr(rp, "NATIVE_EXE", tmp_path / "gone")
    res = check(long_replay, tmp_path, ["W3D_CUTS=0"])
    assert res.verdict == "broken" and any("cannot start" in e and "gone" in e for e in res.errors), res.errors
