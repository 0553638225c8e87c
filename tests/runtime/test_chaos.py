"""The chaos script, briefly: SIGKILLed games, a SIGSTOPped one, a rogue game, an
injected duel under Wine whose launcher and game are SIGKILLed in turn, then SIGTERM;
bench/chaos.py asserts the run kept stepping, logged every cause, restarted every
killed slot, trained on nothing corrupt and left nothing behind (no process carrying
the run's marker, no Wine process of its prefix, no segment)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.conftest import IN_CI, REPO, need

sys.path.insert(0, str(REPO / "bench"))

import chaos  # noqa: E402


def injected_games() -> int:
    """1 injected duel where Wine and mingw-w64 are installed (built here if need be);
    without them the chaos runs on the native games alone, except under CI=true, where
    their absence fails the test (conftest.need)."""
    tools = bool(shutil.which("wine") or shutil.which("wine64")) and bool(shutil.which("x86_64-w64-mingw32-gcc"))
    if tools and chaos.injected_problem():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    problem = None if tools else "wine64 or mingw-w64 (apt-get install wine64 gcc-mingw-w64-x86-64)"
    problem = problem or chaos.injected_problem()
    if problem and IN_CI:
        need("the injected duel's parts", False, problem)
    return 0 if problem else 1


def test_chaos_briefly(null_native):
    injected = injected_games()
    r = chaos.chaos(seconds=18, kill_every=2.5, count=3, recover_s=5.0, seed=1, keep=False, injected=injected)
    try:
        fig = chaos.verify(r)
        assert fig["problems"] == []
        assert fig["sigkills"] >= 2 and fig["sigstops"] == 1 and fig["bad_rows"] >= 1
        # hang: the SIGSTOPped game; crash: every SIGKILL, an injected game's too
        assert fig["restart_causes"].get("crash", 0) >= 2 and fig["restart_causes"].get("hang", 0) >= 1
        assert fig["updates"] >= 1
        if injected:  # the kills took turns: a random game, an injected game's launcher, the game under it
            assert fig["launcher_kills"] >= 1 and fig["game_kills"] >= 1, fig
    finally:
        shutil.rmtree(r["work"], ignore_errors=True)
