"""The duel driven by injection under the supervisor (recipes/duel-injected.toml's
shape): the standalone duel_rt.exe, which knows nothing of w3async, with the hook and
the duel's adapter loaded into it. Eight games step thousands of times with no bad
row and leave nothing; a replay recorded from the injected run plays back identically
in the linked duel natively and under Wine (python -m w3async.replay_parity), and the
test-only break is found at its step."""

from __future__ import annotations

import subprocess
import sys

import pytest

from w3async.runtime.inject import HOOK, LAUNCHER

from tests.conftest import REPO
from tests.runtime.test_supervisor import assert_nothing_left, but_lost, events, lost_starts, run_recipe

pytestmark = pytest.mark.wine

DUEL_RT = REPO / "build" / "win64" / "duel_rt.exe"
ADAPTER = REPO / "build" / "win64" / "duel_adapter.dll"


@pytest.fixture(scope="module")
def injected(wine, mingw) -> None:
    if not all(p.exists() for p in (DUEL_RT, ADAPTER, LAUNCHER, HOOK)):
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)


def duel_group(count: int, time_limit: int, env: dict | None = None, seed: str = "{seed}", **inject) -> dict:
    return {
        "binary": str(DUEL_RT), "runtime": "wine", "count": count, "lanes": 1, "sides": 1,
        "env": {"W3D_SIDES": "agent,ai:easy", "W3D_REWARD": "shaped", **(env or {})},
        "inject": {"adapter": str(ADAPTER), "step_ms": 1000, "draw": False,
                   "draw_calls": ["FillRect", "Ellipse", "Rectangle", "BitBlt"],
                   "args": ["--sides", "human,ai:easy", "--seed", seed, "--lane", "{lane}",
                            "--time-limit", str(time_limit), "--quiet"], **inject},
    }


def duel_recipe(groups: list[dict], **sections) -> dict:
    return {"name": "injected", "game": "duel", "games": groups,
            "supervisor": {"policy": "random", "progress_s": 0, "start_timeout_s": 120, "backoff_s": 0.05,
                           **sections.pop("supervisor", {})},
            **sections}


async def test_eight_injected_duels_step_thousands_of_times_and_leave_nothing(tmp_path, injected):
    data = duel_recipe([duel_group(8, 2000)], stop={"steps": 24000})
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    assert stats["bad_rows"] == 0 and stats["restarts"] == {}
    assert stats["agent_steps"] >= 24000  # 3,000 a game
    ends = [e for e in events(run) if e["event"] in ("bad_row", "game_kill", "game_exit", "slot_failed")]
    assert ends == []
    assert_nothing_left(sup, run)


async def test_a_replay_of_the_injected_game_plays_back_identically_in_the_linked_duel(tmp_path, injected):
    """Replays recorded by the adapter in a supervised, injected run (random orders,
    full states): the linked duel plays them natively and under Wine to the same state
    at every step; with the test-only break bit, the first divergence is its step."""
    run = tmp_path / "run"
    env = {"W3D_RECORD_DIR": "{run_dir}/replays", "W3D_RECORD_STATES": "1", "W3D_SEED": "77"}
    data = duel_recipe([duel_group(2, 1200, env=env, seed="77")], stop={"steps": 600})
    sup, stats = await run_recipe(data, run)
    assert stats["bad_rows"] == 0 and stats["restarts"] == {}
    replays = sorted((run / "replays").glob("*.w3dr"))
    assert len(replays) >= 2, list((run / "replays").iterdir())
    cli = [sys.executable, "-m", "w3async.replay_parity"]
    ok = subprocess.run(cli + [str(p) for p in replays[:2]] + ["--runtime", "native,wine"],
                        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert ok.returncode == 0 and ok.stdout.count("identical") >= 2, ok.stdout + ok.stderr
    broken = subprocess.run(cli + [str(replays[0]), "--env", "W3D_CUTS=0,128", "--env", "W3D_BREAK_STEP=9"],
                            capture_output=True, text=True, cwd=REPO, timeout=600)
    assert broken.returncode != 0 and "first at step 9" in broken.stdout, broken.stdout + broken.stderr


async def test_an_episode_quota_recycles_the_injected_game(tmp_path, injected):
    """W3D_EPISODES=2: the adapter calls host->finish() after its second episode, the game
    exits 0 after that step, and the supervisor recycles it (uncounted)."""
    data = duel_recipe([duel_group(2, 200, env={"W3D_EPISODES": "2"})],
                       supervisor={"min_uptime_s": 0}, stop={"seconds": 12})
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    exits = [e for e in events(run) if e["event"] == "game_exit"]
    lost = lost_starts(run)
    odd = [e for e in exits if e["returncode"] != 0 and e not in lost]  # with its stderr: what ended it
    for i, g in stats["games"].items():
        causes = but_lost(g["causes"], [e for e in lost if e["slot"] == i])
        assert causes.get("recycle", 0) >= 2 and set(causes) == {"recycle"}, (stats["games"], odd)
    assert exits and odd == []
    assert_nothing_left(sup, run)


async def test_a_32_bit_injected_duel_steps_under_the_supervisor(tmp_path, wine32):
    """duel_rt.exe and its adapter built for i686, started by the 32-bit launcher with the
    32-bit hook in the run's WoW64 prefix: four games step with no bad row and leave nothing."""
    from w3async.runtime.pe import I386, read_pe

    game, adapter = REPO / "build" / "win32" / "duel_rt.exe", REPO / "build" / "win32" / "duel_adapter.dll"
    assert read_pe(game).machine == I386 and read_pe(adapter).machine == I386
    group = {**duel_group(4, 2000), "binary": str(game)}
    group["inject"] = {**group["inject"], "adapter": str(adapter)}
    sup, stats = await run_recipe(duel_recipe([group], stop={"steps": 4000}), tmp_path / "run")
    run = tmp_path / "run"
    assert stats["bad_rows"] == 0 and stats["restarts"] == {}, stats
    assert stats["agent_steps"] >= 4000
    assert [e for e in events(run) if e["event"] in ("bad_row", "game_kill", "game_exit", "slot_failed")] == []
    assert_nothing_left(sup, run)
