"""March (games/march), a game shaped like Warcraft III's loop, driven by injection
under Wine as recipes/march-injected.toml runs it: a pacing thread wakes the main thread
by an event every 50 ms turn, the main thread reads its keys through DirectInput 8 and
its mouse through GetCursorPos and draws through Direct3D 9, and three background
threads wait on 10 ms timeouts, a 100 ms waitable timer and a 30 ms timer-queue timer.
The recipe alone steps it at IDirect3DDevice9::Present and turns its drawing off by
name; its adapter uses the host API only. Every thread is on game time, the simulation
is the same drawn or not and run after run, four run at once, 64- and 32-bit."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from w3async.runtime.inject import HOOK, LAUNCHER

from tests.conftest import REPO, need
from tests.runtime.test_supervisor import assert_nothing_left, run_recipe

pytestmark = pytest.mark.wine

DRAW = ["IDirect3DDevice9::Present", "IDirect3DDevice9::Clear", "IDirect3DDevice9::BeginScene",
        "IDirect3DDevice9::EndScene", "IDirect3DDevice9::DrawPrimitiveUP"]
MARCH = re.compile(r"march: march (\d+) turns 300 score (\d+) hash ([0-9a-f]+) sound (\d+) timer (\d+) queue (\d+)")


@pytest.fixture(scope="module")
def built(wine, mingw) -> None:
    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    parts = [REPO / "build" / "win64" / p for p in ("march.exe", "march_adapter.dll", "march.addresses.toml")]
    if not all(p.exists() for p in parts + [LAUNCHER, HOOK]):
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)


def march_recipe(count: int, draw: bool = False, bits: int = 64, policy: str = "check") -> dict:
    win = REPO / "build" / f"win{bits}"
    group = {"binary": str(win / "march.exe"), "runtime": "wine", "count": count, "lanes": 1, "sides": 1,
             "inject": {"adapter": str(win / "march_adapter.dll"), "step_point": "IDirect3DDevice9::Present",
                        "step_ms": 50, "draw": draw, "draw_calls": DRAW,
                        "addresses_file": str(win / "march.addresses.toml")}}
    return {"name": "march", "game": "null", "games": [group], "runtime": {"display": "xvfb"}, "stop": {"seconds": 12},
            "supervisor": {"policy": policy, "progress_s": 0, "start_timeout_s": 120, "backoff_s": 0.05}}


def marches(log: str) -> list[tuple[int, ...]]:
    """(march, score, hash, sound, timer, queue) of each march the game ended."""
    return [(int(m[0]), int(m[1]), int(m[2], 16), int(m[3]), int(m[4]), int(m[5])) for m in MARCH.findall(log)]


async def test_four_marches_step_at_present_with_every_thread_on_game_time(tmp_path, built):
    """Four games at once, drawing off: each ends marches (300 turns, a step a turn), and
    at each march's end its threads have woken as often as its game time holds: the 10 ms
    waits 5 times a turn (fewer where their thread has not run yet), the 100 ms timer once
    every 2 turns, the 30 ms timer 5 times in 3 (before: the 10 ms waits woke once a step,
    and the game stopped after 200-500 turns, its pacing thread a step late)."""
    run = tmp_path / "run"
    sup, stats = await run_recipe(march_recipe(4), run)
    assert stats["restarts"] == {} and stats["bad_rows"] == 0, stats["restarts"]
    for slot in range(4):
        log = (run / "games" / f"slot-{slot}.log").read_text(errors="replace")
        done = marches(log)
        assert len(done) >= 2, log[-600:]
        for number, _, _, sound, timer, queue in done:
            turns = 300 * (number + 1)  # the counters count from the game's start
            # A timer-queue callback runs inside the step (exact). The threads count when they
            # run next, so one starved of CPU lags (under load, 593 of 1,500 at the first
            # march, caught up by the next), never leads.
            assert sound <= turns * 5 + 10 and timer <= turns // 2 + 2, (slot, done)
            assert abs(queue - turns * 5 // 3) <= 3, (slot, done)
        # By the last march they have caught up at least halfway; in wall time they would
        # have counted ~100 times less (the game runs ~100x real time here).
        turns = 300 * (done[-1][0] + 1)
        assert done[-1][3] >= turns * 5 // 2 and done[-1][4] >= turns // 4, (slot, done)
        ends = re.findall(r"march: turns (\d+) game_ms (\d+) wall_ms (\d+)", log)
        assert ends and all(int(g) == 50 * int(t) - 50 for t, g, _ in ends), ends  # game time: 50 ms a turn
    assert_nothing_left(sup, run)


@pytest.mark.parametrize("bits", [64, 32])
async def test_a_march_is_the_same_drawn_or_not_and_run_after_run(tmp_path, built, bits, request):
    """One game, the check policy's answers: its first march's hash and score are the same
    with drawing on, with it off, and off again, 64- and 32-bit."""
    if bits == 32:
        request.getfixturevalue("wine32")
    firsts = []
    for k, draw in enumerate((True, False, False)):
        run = tmp_path / f"run{k}"
        sup, stats = await run_recipe(march_recipe(1, draw=draw, bits=bits), run)
        done = marches((run / "games" / "slot-0.log").read_text(errors="replace"))
        assert done, (draw, (run / "games" / "slot-0.log").read_text(errors="replace")[-600:])
        firsts.append(done[0][:3])
        assert_nothing_left(sup, run)
    assert firsts[0] == firsts[1] == firsts[2], firsts
