"""The untrusted-game boundary, with a small rogue game (tests/rogue/rogue_game.c) run
beside honest null games: whatever the rogue does to its own rows, its header or past
them, the supervisor survives, the rogue is the one restarted (or failed) with its
cause, the honest games keep stepping with every answer checked, and nothing is left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from w3async.runtime.procs import alive
from w3async.recipes import recipe_from_dict
from w3async.compose import supervisor
from w3async.runtime.supervisor import Supervisor

from tests.conftest import REPO
from tests.runtime.test_supervisor import assert_nothing_left, check_failures, events


@pytest.fixture(scope="session")
def rogue(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rogue") / "rogue_game"
    subprocess.run(["gcc", "-O2", "-Wall", "-I", str(REPO / "shim"), "-o", str(out),
                    str(REPO / "tests/rogue/rogue_game.c"), str(REPO / "shim/w3s.c"), "-lm", "-pthread"], check=True)
    return out


def _recipe(rogue: Path, null: Path, mode: str, seconds: float, env: dict | None = None, **supervisor) -> dict:
    return {
        "name": "hostile", "game": "null",
        "games": [{"binary": str(rogue), "count": 1, "lanes": 1, "env": {"W3R_MODE": mode, **(env or {})}},
                  {"binary": str(null), "count": 2, "lanes": 2}],
        "supervisor": {"progress_s": 0, "backoff_s": 0.05, "backoff_max_s": 0.2, "hang_timeout_s": 1.0,
                       **supervisor},
        "stop": {"seconds": seconds},
    }


async def _run(tmp_path: Path, data: dict) -> tuple[Supervisor, dict, Path]:
    run = tmp_path / "run"
    sup = supervisor(recipe_from_dict(data), run)
    stats = await sup.run()  # returns: the supervisor survived whatever the rogue did
    return sup, stats, run


def _honest_games_unharmed(stats: dict, run: Path) -> None:
    """Slots 1 and 2 (null games checking every answer) never restarted, were never
    blamed, and stepped to the end."""
    for slot in (1, 2):
        assert stats["games"][slot]["causes"] == {}, f"honest slot {slot} was restarted"
        log = (run / "games" / f"slot-{slot}.log").read_text()
        m = re.search(r"null: (\d+) steps, checked (\d+) answers, 0 failures", log)
        assert m and int(m.group(1)) > 100, f"honest slot {slot} did not step to a clean stop: {log[-300:]}"
    assert check_failures(run) == []
    blamed = {e["slot"] for e in events(run) if e["event"] in ("bad_row", "game_kill", "game_exit")}
    assert blamed <= {0}, f"honest games were blamed: {blamed}"
    assert not [e for e in events(run) if e["event"] == "fault"]


# A game that answers itself runs ahead of the protocol: its next post skips a sequence
# number (bad_row), or it waits on an answer it already took (hang).
@pytest.mark.parametrize("mode,causes", [("flip", {"bad_row"}), ("fields", {"bad_row"}), ("act", {"bad_row", "hang"}),
                                         ("neighbour", {"crash"}), ("unlink", {"crash"})])
async def test_a_rogue_game_is_the_one_restarted(tmp_path, rogue, null_native, mode, causes):
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, mode, 5.0))
    got = stats["games"][0]["causes"]
    assert got and set(got) <= causes, stats["games"][0]
    _honest_games_unharmed(stats, run)
    assert_nothing_left(sup, run)


async def test_n_ent_flipped_after_the_check_never_reaches_the_batch(tmp_path, rogue, null_native):
    """The row is read once: every bad_row of the flipping game names n_ent with the big
    value, and the run's rounds never saw it (no fault, no crash of the supervisor)."""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "flip", 5.0))
    bad = [e for e in events(run) if e["event"] == "bad_row"]
    assert bad and all(e["slot"] == 0 and e["field"] == "n_ent" and e["value"] == str(1 << 20) for e in bad)
    assert stats["agent_steps"] > 0
    assert_nothing_left(sup, run)


async def test_a_game_writing_its_header_harms_only_itself(tmp_path, rogue, null_native):
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "header", 5.0, restart_budget=5,
                                                   restart_window_s=60.0))
    _honest_games_unharmed(stats, run)
    # The rogue ends itself (it reads STOP in its own header) and restarts inside its
    # budget with backoff, then is failed; no storm.
    rogue_slot = stats["games"][0]
    assert rogue_slot["restarts"] <= 6, rogue_slot
    assert rogue_slot["state"] == "failed"
    failed = [e for e in events(run) if e["event"] == "slot_failed"]
    assert len(failed) == 1 and "budget" in failed[0]["reason"]
    assert_nothing_left(sup, run)


async def test_a_game_that_exits_0_at_once_is_failed_not_looped(tmp_path, rogue, null_native):
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "exit0", 3.0, max_start_failures=3))
    rogue_slot = stats["games"][0]
    assert rogue_slot["state"] == "failed" and rogue_slot["restarts"] == 2, rogue_slot
    assert "before its first post 3 times" in [e for e in events(run) if e["event"] == "slot_failed"][0]["reason"]
    _honest_games_unharmed(stats, run)
    assert "1 failed" in sup.summary_games()
    assert_nothing_left(sup, run)


async def test_a_crashed_games_helpers_end_with_it(tmp_path, rogue, null_native):
    """Helpers in the game's process group and in a session of their own both end when
    the game crashes, not only at shutdown. Unsandboxed: the clean-up without a pid
    namespace, by group and marker (sandboxed, the namespace ends them: test_sandbox.py),
    and the pids the helpers print are real ones."""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "helper", 4.0, sandbox="off"))
    log = (run / "games" / "slot-0.log").read_text()
    helpers = [int(p) for p in re.findall(r"rogue: helper pid (\d+)", log)]
    assert len(helpers) >= 4, log[-500:]  # two restarts at least, two helpers each
    assert not [p for p in helpers if alive(p)], "a crashed game's helper outlived it"
    assert stats["games"][0]["causes"].get("crash", 0) >= 2
    shutdown = [e for e in events(run) if e["event"] == "shutdown"][0]
    assert shutdown["leftovers"]["processes"] == []
    assert_nothing_left(sup, run)


async def test_a_flooding_games_output_is_quoted_short_and_printable(tmp_path, rogue, null_native, capfd):
    """A game that prints MBs without a newline (bytes that are not UTF-8, terminal
    escapes) and crashes before its first post: each game_exit quotes a few short lines of its last start, with
    the escapes written out, and neither events.jsonl nor the console (the slot_failed
    reason quotes them) gets the flood.
    Before runtime/gamelog.py, the third exit's `stderr` was a 127 MB line."""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "flood", 3.0,
                                                   {"W3R_FLOOD_KB": "1024", "W3R_STEP": "0"}))
    exits = [e for e in events(run) if e["event"] == "game_exit"]
    assert len(exits) >= 2 and all(e["slot"] == 0 and e["cause"] == "crash" for e in exits)
    for e in exits:
        assert 0 < len(e["stderr"]) < 4096 and e["stderr"].isprintable() and "\\x1b[2J" in e["stderr"], e["stderr"][:200]
    assert max(len(x) for x in (run / "events.jsonl").read_bytes().splitlines()) < 8192
    failed = [e for e in events(run) if e["event"] == "slot_failed"]
    assert len(failed) == 1 and "before its first post" in failed[0]["reason"] and len(failed[0]["reason"]) < 8192
    assert "\x1b" not in capfd.readouterr().err  # the console never gets a game's escapes
    _honest_games_unharmed(stats, run)
    assert_nothing_left(sup, run)


async def test_a_game_printing_without_end_has_its_log_cut(tmp_path, rogue, null_native):
    """A healthy game that prints 4 KiB a step: its log is cut at game_log_mb (said once
    in events.jsonl), it is never restarted for it, and the log ends at most that big.
    (Its file size cap, game_file_mb, is far above what it prints between two cuts.)"""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "spew", 3.0, {"W3R_FLOOD_KB": "4"},
                                                   game_log_mb=1.0, game_file_mb=256.0))
    assert stats["games"][0]["causes"] == {}, stats["games"][0]
    cuts = [e for e in events(run) if e["event"] == "game_log_cut"]
    assert len(cuts) == 1 and cuts[0]["slot"] == 0 and cuts[0]["cut_bytes"] > 0, cuts
    log = run / "games" / "slot-0.log"
    assert log.stat().st_size <= 2**20
    assert b"bytes cut here" in log.read_bytes()
    _honest_games_unharmed(stats, run)
    assert_nothing_left(sup, run)


@pytest.mark.parametrize("mode", ["flood", "burst"])
async def test_a_burst_of_output_stops_at_the_file_size_cap(tmp_path, rogue, null_native, mode):
    """400 MiB printed at once, faster than the watch looks at the log (twice a second):
    the kernel stops the log at twice game_log_mb at the write that reaches it. A game
    that takes the signal is recycled, cause `file_size`; one that ignores it (its writes
    fail) steps on. Before: 68 MiB of an 8 MiB cap."""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, mode, 3.0, {"W3R_FLOOD_KB": str(400 * 1024)},
                                                   game_log_mb=1.0))
    log = run / "games" / "slot-0.log"
    assert log.stat().st_size <= 2 * 2**20 + 4096, log.stat().st_size  # + the supervisor's start lines
    exits = [e for e in events(run) if e["event"] == "game_exit" and e["slot"] == 0]
    if mode == "flood":
        assert exits and {e["cause"] for e in exits} == {"file_size"}, exits
        assert stats["games"][0]["causes"].get("file_size", 0) >= 1, stats["games"][0]
    else:
        assert stats["games"][0]["causes"] == {} and not exits, (stats["games"][0], exits)
    _honest_games_unharmed(stats, run)
    assert_nothing_left(sup, run)


async def test_an_orphan_that_hides_ends_with_its_game(tmp_path, rogue, null_native):
    """A helper that leaves the game's process group, zeroes its environment block and
    still writes into the game's rows: found by its mapping of the segment and ended when
    its game ends, not at shutdown (`strays_killed` stays empty) and not never. The
    restarted game has a new segment: the orphan's writes never reach it. Unsandboxed, as
    the test above."""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "orphan", 4.0, sandbox="off"))
    log = (run / "games" / "slot-0.log").read_text()
    orphans = [int(p) for p in re.findall(r"rogue: orphan pid (\d+)", log)]
    try:
        assert len(orphans) == 1, log[-500:]
        assert not alive(orphans[0]), "the orphan outlived its game and the run"
        shutdown = [e for e in events(run) if e["event"] == "shutdown"][0]
        assert shutdown["leftovers"]["strays_killed"] == [], "the orphan was only found at shutdown"
        assert stats["games"][0]["restarts"] == 1 and set(stats["games"][0]["causes"]) <= {"bad_row", "crash"}
        _honest_games_unharmed(stats, run)
        assert_nothing_left(sup, run)
    finally:
        for p in orphans:
            if alive(p):
                os.kill(p, signal.SIGKILL)


async def test_a_doorbell_rung_without_end_harms_no_one(tmp_path, rogue, null_native):
    """A game whose thread rings the shared obs doorbell in a tight loop: rings merge (one
    read clears them), so it is never restarted and the honest games step on."""
    sup, stats, run = await _run(tmp_path, _recipe(rogue, null_native, "ring", 3.0))
    assert stats["games"][0]["causes"] == {} and stats["games"][0]["state"] == "stopped"
    _honest_games_unharmed(stats, run)
    assert_nothing_left(sup, run)


# The supervisor in a child process: a loop that freezes fails the test instead of hanging it.
FREEZABLE_RUN = """
import asyncio, json, sys
from w3async.recipes import recipe_from_dict
from w3async.compose import supervisor
sup = supervisor(recipe_from_dict(json.loads(sys.argv[1])), sys.argv[2])
stats = asyncio.run(sup.run())
print(json.dumps({"games": stats["games"], "agent_steps": stats["agent_steps"], "leftovers": sup.leftovers},
                 default=str))
"""


def _run_apart(tmp_path: Path, data: dict) -> tuple[dict, Path]:
    run = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-c", FREEZABLE_RUN, json.dumps(data), str(run)], cwd=REPO, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=30 + data["stop"]["seconds"])
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the games follow their supervisor (PR_SET_PDEATHSIG)
        p.communicate()
        pytest.fail("the supervisor's loop froze: the run never stopped")
    assert p.returncode == 0, err[-3000:]
    stats = json.loads(out.splitlines()[-1])
    stats["games"] = {int(k): v for k, v in stats["games"].items()}
    return stats, run


def test_a_game_that_takes_the_obs_doorbell_stops_no_one(tmp_path, rogue, null_native):
    """The rogue makes the obs doorbell it inherited blocking and reads it without end.
    When that doorbell was the supervisor's own eventfd (one open file for every holder),
    the rogue took the rings of every game: the honest games made 0 to 8 steps in 4 s (5
    tries), and the loop's read of the now blocking eventfd could wait for a ring that
    never came. A game's end of the obs pipe can only be written: every game steps on."""
    stats, run = _run_apart(tmp_path, _recipe(rogue, null_native, "steal", 4.0))
    assert stats["games"][0]["causes"] == {}, stats["games"][0]
    _honest_games_unharmed(stats, run)
    assert stats["leftovers"]["processes"] == [] and stats["leftovers"]["wine"] == []
    assert [e for e in events(run) if e["event"] == "shutdown"]


async def test_a_game_whose_rings_are_lost_still_steps(tmp_path, rogue, null_native):
    """A game alone in its recipe whose obs doorbell goes nowhere (a ring lost to another
    reader of a Windows game's shared FIFO looks the same): the watch's round, twice a
    second, still answers it, so it steps on; before, its rows waited for good."""
    data = _recipe(rogue, null_native, "deaf", 4.0, env={"W3R_STEP": "0"})
    data["games"] = data["games"][:1]
    sup, stats, run = await _run(tmp_path, data)
    assert stats["games"][0]["causes"] == {}, stats["games"][0]
    assert stats["agent_steps"] >= 2 * 3, stats  # 2 rows a step, 3 steps or more in 4 s (about 8)
    assert_nothing_left(sup, run)
