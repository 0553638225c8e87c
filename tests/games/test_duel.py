"""The duel game: built-in AI strength, cost per step, and agent mode under the shim
(rows that pass the supervisor's checks, masks the game honours, replays recorded in a
training run that play back to the hashes the rows carried)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
import types
from pathlib import Path

import numpy as np
import pytest

from w3async.sync import layout
from w3async.games.duel.spec import DUEL_SPEC
from w3async.sync.gather import NumpyGatherer
from w3async.games.duel.replay import read_replay
from w3async.sync.table import Table, segment_name
from w3async.runtime.gamestart import launch
from w3async.runtime.native import NativeRuntime

REPO = Path(__file__).resolve().parents[2]
DUEL = REPO / "build" / "native" / "duel"


@pytest.fixture(scope="session")
def duel() -> Path:
    subprocess.run(["make", "-s", "-C", "games/duel", "native", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    return DUEL


def selfplay(duel: Path, a: str, b: str, games: int = 100, seed: int = 11) -> dict:
    out = subprocess.run([str(duel), "--selfplay", f"{a},{b}", "--games", str(games), "--seed", str(seed)],
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_random_loses_to_easy(duel):
    r = selfplay(duel, "random", "ai:easy")
    assert r["games"] == 100
    assert r["wins_a"] < 10, r


@pytest.mark.parametrize("upper,lower", [("ai:normal", "ai:easy"), ("ai:hard", "ai:normal")])
def test_each_level_beats_the_one_below(duel, upper, lower):
    r = selfplay(duel, upper, lower)
    assert r["wins_a"] >= 75, r


def test_a_step_costs_well_under_a_millisecond(duel):
    out = subprocess.run([str(duel), "--bench", "--sides", "ai:hard,ai:hard", "--map", "camps", "--steps", "600"],
                         capture_output=True, text=True, timeout=60, check=True)
    r = json.loads(out.stdout)
    assert r["cpu_ms_per_step"] < 0.5, r


def test_bad_environment_is_named(duel):
    p = subprocess.run([str(duel)], env={**os.environ, "W3D_SIDES": "agent,ai:brutal"}, capture_output=True, text=True)
    assert p.returncode == layout.EXIT_ATTACH
    assert "ai:brutal" in p.stderr and "ai:easy" in p.stderr, p.stderr


def _legal(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random allowed choice per head: mask (n, heads, HEAD_MAX) -> (n, heads)."""
    n = mask.shape[0]
    out = np.zeros((n, layout.N_HEADS), np.int32)
    for i in range(n):
        for h in range(layout.N_HEADS):
            out[i, h] = rng.choice(np.flatnonzero(mask[i, h]))
    return out


@pytest.mark.parametrize("runtime", ["native", pytest.param("wine", marks=pytest.mark.wine)])
def test_agent_mode_under_the_shim(duel, tmp_path, runtime, request):
    """4 lanes of agent vs ai:easy in one process; random legal answers, plus a masked-out
    training order now and then that the game must count as discarded; 3 episodes, then
    the game exits 0. Every row passes the supervisor's checks; recorded replays play
    back natively to the hashes the rows carried (under Wine too)."""
    lanes, rng = 4, np.random.default_rng(5)
    binary = duel
    if runtime == "wine":
        request.getfixturevalue("wine")
        from w3async.runtime.wine import WineConfig, WineRuntime, windows_path

        subprocess.run(["make", "-s", "-C", "games/duel", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
        binary = REPO / "build" / "win64" / "duel.exe"
        rt = WineRuntime(WineConfig())
    else:
        rt = NativeRuntime()
    table = Table(segment_name("duel"), lanes)
    bells = rt.doorbells(tmp_path, 0)
    log = open(tmp_path / "duel.log", "wb")
    rec_dir = tmp_path / "replays"
    rec_dir.mkdir()
    env = {"W3S_ROW0": "0", "W3S_NROWS": str(lanes), "W3D_SIDES": "agent,ai:easy", "W3D_EPISODES": "3",
           "W3D_MAP": "rotate", "W3D_SEED": "9", "W3D_RECORD_SHARE": "1", "W3D_REWARD": "shaped",
           "W3D_RECORD_DIR": windows_path(rec_dir) if runtime == "wine" else str(rec_dir)}
    proc = _spawn(rt, binary, env, bells, table.segment(0), log)
    g = NumpyGatherer(table, 1, DUEL_SPEC.n_types)
    g.attach_game(0, slice(0, lanes), bells.act)
    hashes: dict[tuple[int, int, int], int] = {}
    expect_discard: dict[int, bool] = {}
    seen_first = seen_done = shaped = 0
    outcomes = []
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None:
            assert time.monotonic() < deadline, "the duel did not finish 3 episodes in 90 s"
            select.select([bells.obs_fd], [], [], 0.2)
            rt.obs.drain()
            b = g.gather()
            assert not b.bad, b.bad
            if b.n == 0:
                continue
            mask = b.mask[: b.n]
            for h, size in enumerate(DUEL_SPEC.head_sizes):
                assert not mask[:, h, size:].any(), f"head {h} allows a choice past its {size}"
            acts = _legal(mask, rng)
            for i in range(b.n):
                row, flags = int(b.rows[i]), int(b.flags[i])
                seen_first += bool(flags & layout.FLAG_FIRST)
                seen_done += bool(flags & layout.FLAG_DONE)
                if flags & layout.FLAG_DONE:
                    outcomes.append(float(b.reward[i]))
                else:
                    shaped += b.reward[i] != 0
                assert b.n_ent[i] >= 1 and b.ent_type[i, 0] == 0, "entity 0 is the own base"
                assert mask[i, 3, 0] == 1
                if expect_discard.pop(row, False) and not flags & layout.FLAG_FIRST:
                    assert b.discarded[i] == 1, f"row {row}: a masked-out order was not counted"
                else:
                    assert b.discarded[i] == 0, f"row {row}: orders within the masks were discarded"
                hashes[(int(b.lane[i]), int(b.episode[i]), int(b.step[i]))] = int(b.state_hash[i])
                banned = np.flatnonzero(mask[i, 0, :4] == 0)
                if banned.size and not flags & layout.FLAG_DONE and rng.random() < 0.2:
                    acts[i, 0] = banned[0]
                    expect_discard[row] = True
            g.answer(b.rows[: b.n], b.obs_seq[: b.n], acts, np.zeros(b.n, np.uint32))
        assert proc.wait(5) == layout.EXIT_OK, (tmp_path / "duel.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        bells.close()
        if runtime == "wine":
            rt.cleanup()
        rt.close()
        table.close()
        table.unlink()
    assert seen_first >= lanes and seen_done >= 3
    assert shaped > 0, "W3D_REWARD=shaped gave no reward before the end"
    assert all(abs(r) > 0.5 for r in outcomes), outcomes  # the +-1 of the outcome dominates
    done = sorted(rec_dir.glob("*.w3dr"))
    assert len(done) >= 3, list(rec_dir.iterdir())
    for path in done:
        rep = read_replay(path)
        lane, ep = rep.header.lane, rep.header.episode
        assert rep.header.sides == ("agent", "ai:easy")
        out = tmp_path / (path.stem + ".dump")
        subprocess.run([str(duel), "--play-replay", str(path), "--dump", str(out)], check=True, capture_output=True)
        dump = read_replay(out)
        assert [s.hash for s in dump.steps] == [s.hash for s in rep.steps]
        # the row posted at step k carries the hash after step k-1
        for k, s in enumerate(rep.steps):
            assert hashes[(lane, ep, k + 1)] == s.hash, f"{path.name}: step {k}"


def test_live_games_do_not_depend_on_the_cuts(duel, tmp_path):
    """The built-in AI reads the cached paths too (visibility memo): six whole games, with
    every cut off and on, give byte-identical replays (every side's orders, every hash)."""
    dirs = []
    for cuts in ("0", "7"):
        d = tmp_path / f"cuts{cuts}"
        subprocess.run([str(duel), "--selfplay", "ai:hard,random", "--games", "6", "--seed", "3", "--record-dir", str(d)],
                       env={**os.environ, "W3D_CUTS": cuts}, check=True, capture_output=True)
        dirs.append(d)
    names = sorted(p.name for p in dirs[0].glob("*.w3dr"))
    assert len(names) == 6 and names == sorted(p.name for p in dirs[1].glob("*.w3dr"))
    for n in names:
        assert (dirs[0] / n).read_bytes() == (dirs[1] / n).read_bytes(), n


def _spawn(rt, binary: Path, env: dict, bells, segment, log):
    """One start of binary by the runtime (gamestart.Runtime), unsandboxed, not niced."""
    slot = types.SimpleNamespace(binary=Path(binary), bells=bells)
    return launch(rt.start(slot, env, segment), 0, log)


def _rewards(duel: Path, tmp_path: Path, mode: str) -> list[tuple[int, float]]:
    """One lane of agent against easy, seeded random orders: (flags, reward) of every row
    of its first episode (the same game for every mode: the rewards do not steer it)."""
    rt, rng = NativeRuntime(), np.random.default_rng(3)
    table = Table(segment_name("duelr"), 1)
    bells = rt.doorbells(tmp_path, 0)
    env = {"W3S_ROW0": "0", "W3S_NROWS": "1", "W3D_SIDES": "agent,ai:easy", "W3D_EPISODES": "1",
           "W3D_MAP": "open", "W3D_SEED": "4", "W3D_REWARD": mode}
    with open(tmp_path / f"duel-{mode}.log", "wb") as log:
        proc = _spawn(rt, duel, env, bells, table.segment(0), log)
    g = NumpyGatherer(table, 1, DUEL_SPEC.n_types)
    g.attach_game(0, slice(0, 1), bells.act)
    rows = []
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None:
            assert time.monotonic() < deadline, "one episode of random against easy took over 60 s"
            select.select([bells.obs_fd], [], [], 0.2)
            rt.obs.drain()
            b = g.gather()
            assert not b.bad, b.bad
            rows += [(int(b.flags[i]), float(b.reward[i])) for i in range(b.n)]
            if b.n:
                g.answer(b.rows[: b.n], b.obs_seq[: b.n], _legal(b.mask[: b.n], rng), np.zeros(b.n, np.uint32))
        assert proc.wait(5) == layout.EXIT_OK, (tmp_path / f"duel-{mode}.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        bells.close()
        rt.close()
        table.close()
        table.unlink()
    return rows


def test_the_attack_reward_pays_what_a_side_deals_and_never_what_it_suffers(duel, tmp_path):
    """W3D_REWARD=attack (fgself's training lanes): shaping for damage and kills
    dealt only, so that a side that waits earns nothing and a failed attack still earns
    more than waiting. The same game scored `shaped` is charged for what it took."""
    shaped, attack = _rewards(duel, tmp_path, "shaped"), _rewards(duel, tmp_path, "attack")
    assert [f for f, _ in shaped] == [f for f, _ in attack], "the reward mode changed the game"
    steps = [r for f, r in attack if not f & layout.FLAG_DONE]
    assert min(steps) >= 0.0 and sum(r > 0 for r in steps) >= 3, steps
    assert min(r for f, r in shaped if not f & layout.FLAG_DONE) < 0.0, "the shaped game took no damage"
    assert attack[-1][0] & layout.FLAG_DONE and attack[-1][1] >= -1.0, attack[-1]
    assert sum(r for _, r in attack) > sum(r for _, r in shaped)


def test_a_bad_reward_mode_is_named(duel):
    p = subprocess.run([str(duel)], env={**os.environ, "W3D_SIDES": "agent,ai:easy", "W3D_REWARD": "kills"},
                       capture_output=True, text=True)
    assert p.returncode == layout.EXIT_ATTACH
    assert "W3D_REWARD=kills: must be win, shaped or attack" in p.stderr, p.stderr
