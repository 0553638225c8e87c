"""Injection (shim/inject, docs/hooking.md): an unmodified Windows program, the probe
(tests/inject/probe_game.c: a 60-frames-a-second loop on QueryPerformanceCounter and
Sleep that knows nothing of w3async), started through the launcher with the hook and
an adapter under the supervisor: answered and checked, its own clock read in game
time, and every way injection or the adapter fails ends in one clear cause, a restart
or a failed slot, and nothing left behind."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from w3async.recipes import RecipeError, recipe_from_dict
from w3async.runtime.inject import HOOK, LAUNCHER

from .conftest import REPO
from .test_supervisor import assert_nothing_left, events, null_recipe, run_recipe

pytestmark = pytest.mark.wine


@pytest.fixture(scope="session")
def probe(wine, mingw, tmp_path_factory) -> dict[str, Path]:
    """The probe game and its adapter, built for this session; the launcher and hook built by make."""
    if not (LAUNCHER.exists() and HOOK.exists()):
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    out = tmp_path_factory.mktemp("probe")
    src = REPO / "tests" / "inject"
    game, adapter = out / "probe_game.exe", out / "probe_adapter.dll"
    subprocess.run([mingw, "-O2", "-Wall", "-o", str(game), str(src / "probe_game.c"), "-lgdi32"], check=True)
    subprocess.run([mingw, "-O2", "-Wall", "-shared", "-I", str(REPO / "shim"), "-I", str(REPO / "shim" / "inject"),
                    "-o", str(adapter), str(src / "probe_adapter.c")], check=True)
    return {"game": game, "adapter": adapter, "dir": out}


def probe_group(probe: dict, count: int = 1, args: list[str] | None = None, env: dict | None = None,
                adapter: Path | str | None = None, **inject) -> dict:
    return {"binary": str(probe["game"]), "runtime": "wine", "count": count, "lanes": 1, "sides": 1,
            "env": {"W3P_CHECK": "1", **(env or {})},
            "inject": {"adapter": str(adapter or probe["adapter"]), "args": args or [], "step_ms": 50,
                       "timeout_s": 10, **inject}}


def game_logs(run: Path) -> dict[int, str]:
    return {int(p.stem.split("-")[1]): p.read_text(errors="replace") for p in (run / "games").glob("slot-*.log")}


async def test_eight_injected_games_step_checked_and_leave_nothing(tmp_path, probe):
    """8 injected probes answered by the check policy for thousands of steps: every
    answer recomputed by the adapter, no bad row, no restart, nothing left."""
    data = null_recipe([probe_group(probe, count=8)], supervisor={"start_timeout_s": 120}, stop={"seconds": 15})
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    assert stats["restarts"] == {}, game_logs(run)
    assert not [e for e in events(run) if e["event"] in ("bad_row", "game_kill", "game_exit")]
    assert len(stats["games"]) == 8 and stats["bad_rows"] == 0
    assert stats["agent_steps"] >= 8 * 2000  # thousands of steps a game
    assert_nothing_left(sup, run)


async def test_the_games_clock_advances_exactly_step_ms_a_step(tmp_path, probe):
    """The probe prints what QueryPerformanceCounter and GetTickCount told it at every
    pass of its loop (one pass a step, its Sleep(1) being the step point): exactly
    step_ms of game time a pass, however long the supervisor took to answer."""
    step_ms = 37
    data = null_recipe([probe_group(probe, args=["--print", "200"], step_ms=step_ms)],
                       supervisor={"start_timeout_s": 120, "round_period_ms": 5}, stop={"steps": 300})
    sup, _ = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    freq = int(re.search(r"probe: frequency (\d+)", log).group(1))
    passes = [tuple(map(int, m)) for m in re.findall(r"pass (\d+) qpc (-?\d+) tick (\d+) frames (\d+)", log)]
    assert len(passes) >= 150, log[-800:]
    # pass 0 reads the clock before the first step; every pass after reads one step later
    for k, qpc, tick, frames in passes[1:]:
        assert qpc == step_ms * freq // 1000, (k, qpc)
        assert tick == step_ms, (k, tick)
        assert frames == (k * step_ms) // (1000 // 60) or abs(frames - k * step_ms * 60 / 1000) <= 1, (k, frames)
    assert_nothing_left(sup, tmp_path / "run")
