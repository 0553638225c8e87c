"""Pong (games/pong) driven by injection under Wine, as recipes/pong-injected.toml runs
it: the stripped pong.exe, which exports nothing, with the hook and its adapter loaded
into it. The adapter finds the match by the offset nm found (addresses_file) and plays
with arrow-key messages; the hook alone paces the game: its clock covers the CRT's
clock() and PeekMessageA steps once a frame. Four games step and leave nothing, every
step is one frame and game time is frames x 16 ms; a seed and the answers give the
same match twice; every answer's key moves the paddle."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from w3async.runtime.inject import HOOK, LAUNCHER

from tests.conftest import REPO
from tests.runtime.test_supervisor import assert_nothing_left, events, run_recipe

pytestmark = pytest.mark.wine

WIN64 = REPO / "build" / "win64"
PARTS = [WIN64 / p for p in ("pong.exe", "pong_adapter.dll", "pong.addresses.toml")] + [LAUNCHER, HOOK]
DRAW_CALLS = ["FillRect", "Rectangle", "Ellipse", "BitBlt", "TextOutA@20", "LineTo@12", "MoveToEx@16"]


@pytest.fixture(scope="module")
def built(wine, mingw) -> None:
    if not all(p.exists() for p in PARTS):
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)


def pong_recipe(count: int, steps: int, policy: str = "random", seed: str = "{seed}", env: dict | None = None) -> dict:
    group = {"binary": str(WIN64 / "pong.exe"), "runtime": "wine", "count": count, "lanes": 1, "sides": 1,
             "env": env or {},
             "inject": {"adapter": str(WIN64 / "pong_adapter.dll"), "args": ["--seed", seed, "--points", "3"],
                        "step_point": "PeekMessageA", "step_ms": 16, "draw": False, "draw_calls": DRAW_CALLS,
                        "addresses_file": str(WIN64 / "pong.addresses.toml")}}
    return {"name": "pong", "game": "null", "games": [group], "stop": {"steps": steps},
            "supervisor": {"policy": policy, "progress_s": 0, "start_timeout_s": 120, "backoff_s": 0.05}}


def traces(run: Path) -> dict[str, list[list[str]]]:
    """lane trace file -> its lines split: step frame paddle score0 score1 hash action reward flags."""
    return {p.name: [x.split() for x in p.read_text().splitlines() if len(x.split()) == 9]
            for p in sorted((run / "trace").glob("*.trace"))}


def matches(run: Path) -> list[tuple[int, int, int]]:
    """(frames, game ms, wall ms) of each finished match, from the adapter's line at its
    end (wall ms: KUSER_SHARED_DATA's interrupt time, which the hook leaves alone)."""
    pat = re.compile(r"pong: frames (\d+) game_ms (\d+) wall_ms (\d+)")
    return [tuple(int(x) for x in m.groups()) for p in sorted((run / "games").glob("slot-*.log"))
            for m in pat.finditer(p.read_text(errors="replace"))]


async def test_four_injected_pongs_step_recycle_and_leave_nothing(tmp_path, built):
    run = tmp_path / "run"
    sup, stats = await run_recipe(pong_recipe(4, 6000), run)
    done = matches(run)
    assert done, "no match finished"
    # A step a frame: game time at a match's end is its frames x step_ms (16), exactly.
    assert all(game == frames * 16 for frames, game, _ in done), done
    game_ms, wall_ms = sum(m[1] for m in done), sum(m[2] for m in done)
    print(f"pong x4: {len(done)} matches, game time {game_ms} ms in {wall_ms} ms of the games' wall time "
          f"({game_ms / max(wall_ms, 1):.1f}x; per match {min(g / max(w, 1) for _, g, w in done):.1f}x.."
          f"{max(g / max(w, 1) for _, g, w in done):.1f}x)")
    # Measured 31-46x over all matches in 7 runs with the machine busy (a single short
    # match, its start-up included, went as low as 13x): 10x has a wide margin.
    assert game_ms >= 10 * wall_ms, (game_ms, wall_ms, done)
    assert stats["bad_rows"] == 0 and stats["agent_steps"] >= 6000
    exits = [e for e in events(run) if e["event"] in ("game_exit", "game_kill", "bad_row", "slot_failed")]
    # One match a process: every exit is the adapter's finish after a DONE row.
    assert exits and all(e["event"] == "game_exit" and e["cause"] == "recycle" and e["returncode"] == 0
                         for e in exits), exits
    assert_nothing_left(sup, run)


async def test_the_same_seed_and_answers_play_the_same_match_and_the_keys_move_the_paddle(tmp_path, built):
    """Two runs of two games at seed 7 under the check policy (an answer a function of
    the row's sequence number and lane): per lane, the same rows in both runs; the
    lanes' different answers give different matches. Each step's key (up, down, none)
    moves the paddle exactly one frame's worth in the frame after the next."""
    got = []
    for k in range(2):
        run = tmp_path / f"run{k}"
        (run / "trace").mkdir(parents=True)
        sup, stats = await run_recipe(pong_recipe(2, 2000, policy="check", seed="7",
                                                  env={"PONG_TRACE": "{run_dir_windows}\\trace"}), run)
        assert stats["bad_rows"] == 0
        assert_nothing_left(sup, run)
        got.append(traces(run))
    assert sorted(got[0]) == sorted(got[1]) and len(got[0]) == 2, got[0].keys()
    # The steps are the run's, not each game's: a game whose Wine start was slower (a loaded
    # machine) has fewer (340 of 1,500 once); the frames both runs share are compared.
    n = min(len(t) for run in got for t in run.values())
    assert n >= 200
    for lane in got[0]:
        assert got[0][lane][:n] == got[1][lane][:n], lane
    for rows in got[0].values():  # a step a frame: within a match the frame counter moves on by one a step
        for cur, nxt in zip(rows, rows[1:]):
            if int(nxt[0]) == int(cur[0]) + 1 and not int(cur[8]) & 2:
                assert int(nxt[1]) == int(cur[1]) + 1, (cur, nxt)
    a, b = (got[0][lane][:n] for lane in sorted(got[0]))
    assert [x[5] for x in a] != [x[5] for x in b]  # other answers, another match
    moves = 0
    for rows in got[0].values():
        for cur, nxt, after in zip(rows, rows[1:], rows[2:]):
            if int(after[0]) != int(cur[0]) + 2 or int(nxt[8]) & 2:
                continue  # a new match (the next process) or the end of one
            # The step is at a drained PeekMessage, and the frame runs right after it:
            # the keys posted then are read at the next loop, for the frame after.
            pad, action = int(nxt[2]), int(cur[6])
            want = {0: pad, 1: max(pad - 8, 0), 2: min(pad + 8, 400)}[action]
            assert int(after[2]) == want, (cur, nxt, after)
            moves += want != pad
    assert moves > 100
    scores = {(x[3], x[4]) for rows in got[0].values() for x in rows}
    assert len(scores) > 2  # points were scored


def test_a_missing_or_malformed_addresses_file_is_one_line_before_anything_starts(tmp_path, built):
    from w3async.recipes import recipe_from_dict
    from w3async.runtime import inject_checks as inject

    bad = tmp_path / "bad.toml"
    bad.write_text('state = "0xd060"\n')
    for path, says in ((tmp_path / "none.toml", "cannot be read (No such file or directory): make build writes"),
                       (bad, "state = '0xd060': expected name = \"module+0xoffset\"")):
        data = pong_recipe(1, 10)
        data["games"][0]["inject"]["addresses_file"] = str(path)
        problems = inject.check(recipe_from_dict(data))
        assert len(problems) == 1 and problems[0].startswith("games[0].inject.addresses_file = ") and says in problems[0], \
            problems


async def test_a_repeat_holds_each_answer_for_frames_and_the_hit_reward_pays_each_return(tmp_path, built):
    """pong-learn's settings: PONG_REPEAT=4 makes a step every 4th frame (a match's last
    frame is always one); each step's reward is its frames' points won minus lost, plus
    PONG_HIT_REWARD for a ball the paddle sent back since the last step. The check
    policy's paddle at seed 7 returns some balls."""
    run = tmp_path / "run"
    (run / "trace").mkdir(parents=True)
    data = pong_recipe(1, 1500, policy="check", seed="7",
                       env={"PONG_TRACE": "{run_dir_windows}\\trace", "PONG_REPEAT": "4", "PONG_HIT_REWARD": "0.5"})
    sup, stats = await run_recipe(data, run)
    assert stats["bad_rows"] == 0
    assert_nothing_left(sup, run)
    (rows,) = traces(run).values()
    hits = 0
    for cur, nxt in zip(rows, rows[1:]):
        if int(nxt[0]) != int(cur[0]) + 1:
            continue  # the next match
        frames = int(nxt[1]) - int(cur[1])
        points = (int(nxt[3]) - int(cur[3])) - (int(nxt[4]) - int(cur[4]))
        extra = float(nxt[7]) - points
        assert frames == 4 or (int(nxt[8]) & 2 and 0 < frames < 4), (cur, nxt)
        assert extra in (0.0, 0.5), (cur, nxt)
        hits += extra == 0.5
    assert hits > 0 and len(rows) >= 1000


async def test_a_malformed_pong_setting_fails_the_start_naming_it(tmp_path, built):
    from w3async.recipes import recipe_from_dict
    from w3async.runtime.runfolder import RunError
    from w3async.compose import supervisor

    data = pong_recipe(1, 100, env={"PONG_REPEAT": "4x"})
    data["supervisor"].update(max_start_failures=2)
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")
    with pytest.raises(RunError) as e:
        await sup.run()
    assert 'PONG_REPEAT="4x" must be a whole number of frames, 1..16' in str(e.value), str(e.value)
    assert_nothing_left(sup, tmp_path / "run")
