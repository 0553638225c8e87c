"""The virtual clock from inside a game (docs/hooking.md, "What the clock covers"):
tests/inject/clock_game.c, a Windows program that knows nothing of w3async, reads every
time source it can reach once a frame (kernel32's, winmm's, the CRT's, ntdll's,
winpthreads' clock_gettime, a DLL's it loads after its start) and counts its timers
(timeSetEvent, waitable timers, a timer queue, ntdll's sleeps). Run injected under the
supervisor, each source must advance exactly step_ms a step, in its unit, and each timer
must fire at the step game time reaches it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from w3async.runtime.wineinstall import wine_install

from tests.conftest import REPO, need
from tests.shim.test_injection import game_logs, probe, probe_group  # noqa: F401 (probe: the adapter's fixture)
from tests.runtime.test_supervisor import assert_nothing_left, null_recipe, run_recipe

pytestmark = pytest.mark.wine

SRC = Path(__file__).resolve().parents[1] / "inject"
EPOCH_1601_TO_1970 = 116444736000000000  # FILETIME units (100 ns) from 1601 to 1970


@pytest.fixture(scope="session", params=["win64", "win32"])
def clock_game(request, probe, mingw, tmp_path_factory) -> dict[str, Path]:  # noqa: F811 (imported above)
    """clock_game.exe with clock_dll.dll beside it (the game loads it by name: the working
    folder is the .exe's) and the probe's adapter, for 64-bit and for 32-bit games."""
    if request.param == "win64":
        out, cc, adapter = probe["dir"], mingw, probe["adapter"]
    else:
        cc = shutil.which("i686-w64-mingw32-gcc")
        need("i686-w64-mingw32-gcc", cc is not None, "apt-get install gcc-mingw-w64-i686")
        need("32-bit Wine", wine_install("wine").runs(32), "dpkg --add-architecture i386; apt-get update; apt-get install wine32")
        if not (REPO / "build" / "win32" / "w3hook.dll").exists():
            subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
        out = tmp_path_factory.mktemp("clock32")
        adapter = out / "probe_adapter.dll"
        subprocess.run([cc, "-O2", "-Wall", "-shared", "-I", str(REPO / "shim"), "-I", str(REPO / "shim" / "inject"),
                        "-o", str(adapter), str(SRC / "probe_adapter.c")], check=True)
    game = out / "clock_game.exe"
    subprocess.run([cc, "-O2", "-Wall", "-o", str(game), str(SRC / "clock_game.c"),
                    "-static", "-lwinmm", "-lntdll", "-lpthread"], check=True)
    subprocess.run([cc, "-O2", "-Wall", "-shared", "-o", str(out / "clock_dll.dll"), str(SRC / "clock_dll.c")],
                   check=True)
    return {"game": game, "adapter": adapter}


def frames_of(log: str) -> list[dict[str, list[int]]]:
    """The game's lines, each a dict of name -> values (dll has two)."""
    rows = []
    for line in log.splitlines():
        if not line.startswith("frame "):
            continue
        words = line.split()
        row: dict[str, list[int]] = {}
        key = ""
        for w in words:
            if re.fullmatch(r"-?\d+", w):
                row[key].append(int(w))
            else:
                key = w
                row[key] = []
        rows.append(row)
    return rows


async def test_every_time_source_and_timer_follows_the_steps(tmp_path, probe, clock_game):  # noqa: F811
    step_ms = 50
    group = probe_group(probe, args=["--dll", "clock_dll.dll", "--dll-at", "3"], step_ms=step_ms,
                        adapter=clock_game["adapter"])
    group["binary"] = str(clock_game["game"])
    data = null_recipe([group], supervisor={"start_timeout_s": 120, "round_period_ms": 5}, stop={"steps": 80})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    rows = frames_of(log)
    assert len(rows) >= 60 and stats["restarts"] == {}, log[-1500:]
    f0 = rows[0]
    assert f0["frame"] == [0] and f0["freq"] == [10_000_000], log[:800]

    units = {  # source -> its units per ms of game time
        "qpc": 10_000, "ntqpc": 10_000, "rtlqpc": 10_000,
        "tick": 1, "tick64": 1, "tgt": 1, "nttick": 1, "clock": 1, "ftime": 1,
        "ft": 10_000, "ftp": 10_000, "ntst": 10_000, "rtlprec": 10_000,
    }
    ns = {"mono": 1_000_000, "real": 1_000_000}  # clock_gettime: ns, from 100 ns counts (+-100 ns)
    for row in rows[1:]:
        k = row["frame"][0]
        t = k * step_ms  # game ms since frame 0 (read before the first step)
        for name, per_ms in units.items():
            assert row[name][0] - f0[name][0] == t * per_ms, (name, k, row[name], f0[name])
        for name, per_ms in ns.items():
            assert abs(row[name][0] - f0[name][0] - t * per_ms) <= 100, (name, k, row[name], f0[name])
        assert row["time"][0] == (row["ft"][0] - EPOCH_1601_TO_1970) // 10**7, (k, row["time"], row["ft"])
        # timers armed at game time 0, before the first step; each fires at the step that reaches it
        assert row["mm"][0] == t // 100, ("timeSetEvent 100 ms", k, row["mm"])
        assert row["ev"][0] == t // 150, ("timeSetEvent EVENT_SET 150 ms", k, row["ev"])
        assert row["wt"][0] == t // 200, ("waitable timer 200 ms", k, row["wt"])
        assert row["q"][0] == t // 250, ("timer queue 250 ms", k, row["q"])
        assert row["once"][0] == (300 // step_ms - 1 if t >= 300 else -1), ("one-shot 300 ms", k, row["once"])
        # other threads' NtDelayExecution(100 ms) and infinite waits on a 100 ms timer: once
        # every second step, +-2 for where each thread was when the line printed
        assert abs(row["ntsleep"][0] - t // 100) <= 2, ("NtDelayExecution", k, row["ntsleep"])
        assert abs(row["wtwait"][0] - t // 100) <= 2, ("wait on a waitable timer", k, row["wtwait"])
        # the DLL loaded at frame 3 reads the same game time through its own imports
        if k >= 3:
            assert row["dll"] == [row["tick64"][0], row["qpc"][0]], ("LoadLibrary'd DLL", k, row["dll"])
        else:
            assert row["dll"] == [-1, -1]
    last = rows[-1]
    game_ms = (last["frame"][0]) * step_ms
    wall_ms = (last["real_us"][0] - f0["real_us"][0]) / 1000
    print(f"clock_game: {game_ms} ms of game time in {wall_ms:.0f} ms of wall time ({game_ms / max(wall_ms, 1e-3):.1f}x)")
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_fixed_epoch_gives_the_same_clock_values_in_every_run(tmp_path, probe, clock_game):  # noqa: F811
    """[games.inject] epoch_s: the system time starts at it and the counters at fixed
    values, so two runs read the same time()/tick/QPC values at the same frames (a game
    that seeds itself from any of them gets the same seed)."""
    epoch, step_ms = 1_700_000_000, 50
    fixed = ["time", "ft", "ftp", "ntst", "rtlprec", "real", "qpc", "ntqpc", "rtlqpc", "tick", "tick64", "tgt",
             "nttick", "mono"]
    runs = []
    for i in range(2):
        group = probe_group(probe, args=["--dll", "clock_dll.dll", "--dll-at", "3"], step_ms=step_ms,
                            adapter=clock_game["adapter"], epoch_s=epoch)
        group["binary"] = str(clock_game["game"])
        data = null_recipe([group], supervisor={"start_timeout_s": 120, "round_period_ms": 5}, stop={"steps": 30})
        run = tmp_path / f"run{i}"
        sup, stats = await run_recipe(data, run)
        log = game_logs(run)[0]
        rows = frames_of(log)
        assert len(rows) >= 20 and stats["restarts"] == {}, log[-1500:]
        assert rows[0]["time"] == [epoch] and rows[0]["ft"] == [epoch * 10**7 + EPOCH_1601_TO_1970], log[:800]
        assert rows[0]["tick64"] == [3_600_000] and rows[0]["qpc"] == [3_600_000 * 10_000], log[:800]
        runs.append({r["frame"][0]: {k: r[k] for k in fixed} for r in rows})
        assert_nothing_left(sup, run)
    common = sorted(set(runs[0]) & set(runs[1]))
    assert len(common) >= 20
    for k in common:
        assert runs[0][k] == runs[1][k], (k, runs[0][k], runs[1][k])
