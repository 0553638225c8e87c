"""Step points for every common frame loop (docs/hooking.md, "Finding the step point"),
and windows without a display ("Windows and displays"): tests/inject/loops_game.c, a
small windowed program that knows nothing of w3async, runs a busy PeekMessage loop, a
GetMessage loop driven by SetTimer, or a Sleep loop; the hook makes a step where each
kind of loop has one, and game time is steps x step_ms from the game's own clock."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from w3async.recipes import recipe_from_dict

from tests.conftest import REPO, need
from tests.shim.test_injection import _export_rva, _failing_run, game_logs, probe, probe_group  # noqa: F401 (fixture)
from tests.runtime.test_supervisor import assert_nothing_left, events, null_recipe, run_recipe

pytestmark = pytest.mark.wine


@pytest.fixture(scope="session")
def loops(probe, mingw) -> dict[str, Path]:  # noqa: F811
    """loops_game.exe and its adapters (plain; with w3a_frame), built for this session."""
    src, out = REPO / "tests" / "inject", probe["dir"]
    inc = ["-I", str(REPO / "shim"), "-I", str(REPO / "shim" / "inject"), "-I", str(src)]
    game = out / "loops_game.exe"
    subprocess.run([mingw, "-O2", "-Wall", "-o", str(game), str(src / "loops_game.c"), "-lgdi32"], check=True)
    built = {"game": game, "dir": out}
    for name, extra in (("adapter", []), ("frame_adapter", ["-DLOOPS_FRAME"])):
        built[name] = out / f"loops_{name}.dll"
        subprocess.run([mingw, "-O2", "-Wall", "-shared", *extra, *inc, "-o", str(built[name]),
                        str(src / "loops_adapter.c")], check=True)
    return built


def loops_group(loops: dict, args: list[str], count: int = 1, env: dict | None = None, adapter: str = "adapter",
                **inject) -> dict:
    return {"binary": str(loops["game"]), "runtime": "wine", "count": count, "lanes": 1, "sides": 1,
            "env": {"W3P_CHECK": "1", **(env or {})},
            "inject": {"adapter": str(loops[adapter]), "args": args, "step_ms": 50, "timeout_s": 10, **inject}}


FRAME = r"frame (\d+) qpc (\d+) tick (\d+) peeks (\d+) timers (\d+)"


def frames(log: str) -> tuple[int, list[tuple[int, ...]]]:
    """(the game's counter frequency, its printed frames: number, qpc, tick, peeks, timers)."""
    freq = int(re.search(r"loops: frequency (\d+)", log).group(1))
    return freq, [tuple(map(int, m)) for m in re.findall(FRAME, log)]


async def test_a_windowed_game_makes_its_window_under_the_default_prefix(tmp_path, loops):
    """No display and no graphics driver set by hand: Wine's null driver (every prefix's,
    made before this or not) gives the game its window."""
    data = null_recipe([loops_group(loops, ["--window", "--loop", "sleep"], step_point="Sleep")],
                       supervisor={"start_timeout_s": 60}, stop={"steps": 50})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    assert "loops: window created" in log and "CreateWindow failed" not in log, log[-600:]
    assert stats["restarts"] == {} and stats["agent_steps"] >= 50
    assert_nothing_left(sup, tmp_path / "run")


@pytest.mark.parametrize("adapter,frame_ms", [("adapter", 50), ("frame_adapter", 50), ("frame_adapter", 100)])
async def test_a_busy_peekmessage_loop_steps_once_a_frame(tmp_path, loops, adapter, frame_ms):
    """A busy loop (PeekMessageA until drained, then QueryPerformanceCounter: a frame each
    frame_ms) steps once a frame: frame k runs at game time (k+1) x frame_ms, one drained
    PeekMessage a frame, however many times the loop spun in wall time. With the adapter's
    w3a_frame, a frame of 100 ms at step_ms 50 is one step (posted) and 50 ms passed
    without a post."""
    window = ["--window"] if adapter == "adapter" else []
    data = null_recipe([loops_group(loops, ["--loop", "peek", "--frame-ms", str(frame_ms), "--print", "150", *window],
                                    adapter=adapter, step_point="PeekMessageA")],
                       supervisor={"start_timeout_s": 60, "round_period_ms": 5}, stop={"steps": 200})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    freq, rows = frames(log)
    assert len(rows) >= 100 and stats["restarts"] == {}, log[-800:]
    for k, qpc, tick, peeks, _ in rows:
        assert qpc == (k + 1) * frame_ms * freq // 1000 and tick == (k + 1) * frame_ms, (k, qpc, tick)
        # one drained call a frame (and, windowed, the window's few messages)
        assert peeks <= (k + 1) * (frame_ms // 50) + (12 if window else 1), (k, peeks)
    assert stats["agent_steps"] >= 200
    assert_nothing_left(sup, tmp_path / "run")


@pytest.mark.parametrize("window", [True, False])
async def test_a_getmessage_loop_steps_at_game_time_timers(tmp_path, loops, window):
    """GetMessageA + WM_TIMER (SetTimer 100 ms, a window's timer or the thread's) at
    step_ms 50: the queue is empty between timers, so each empty GetMessage is a step,
    and WM_TIMER comes every 2nd step, at game time 100, 200, ... (the timer's wall rate
    plays no part)."""
    args = ["--loop", "getmsg", "--timer", "100", "--print", "120"] + (["--window"] if window else [])
    data = null_recipe([loops_group(loops, args, step_point="GetMessageA")],
                       supervisor={"start_timeout_s": 60, "round_period_ms": 5}, stop={"steps": 200})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    freq, rows = frames(log)
    assert len(rows) >= 80 and stats["restarts"] == {}, log[-800:]
    for k, qpc, tick, _, timers in rows:
        assert tick == (k + 1) * 100 and qpc == (k + 1) * 100 * freq // 1000 and timers == k + 1, (k, qpc, tick, timers)
    assert stats["agent_steps"] >= 200
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_step_point_at_an_address_of_the_games_code(tmp_path, probe):  # noqa: F811
    """step_point = "at:exe+0x...": the probe's own probe_frame by its offset (the same
    function as export:probe_frame, found as a disassembler would give it): one step a
    pass, game time step_ms a pass. An offset outside the code (its data) is refused at
    setup, naming the module's code sections."""
    rva = _export_rva(probe["game"], "probe_frame")
    step_ms = 37
    data = null_recipe([probe_group(probe, args=["--print", "120"], step_ms=step_ms, step_point=f"at:exe+{hex(rva)}")],
                       supervisor={"start_timeout_s": 60, "round_period_ms": 5}, stop={"steps": 150})
    sup, _ = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    freq = int(re.search(r"probe: frequency (\d+)", log).group(1))
    passes = [tuple(map(int, m)) for m in re.findall(r"pass (\d+) qpc (-?\d+) tick (\d+) ", log)]
    assert len(passes) >= 100, log[-800:]
    for k, qpc, tick in passes[1:]:
        assert qpc == step_ms * freq // 1000 and tick == step_ms, (k, qpc, tick)
    assert_nothing_left(sup, tmp_path / "run")
    data_rva = _export_rva(probe["game"], "probe_state")
    sup, run, err = await _failing_run(tmp_path / "bad", probe_group(probe, step_point=f"at:exe+{hex(data_rva)}"))
    assert f"the step point at:exe+{hex(data_rva)}: exe+{hex(data_rva)} is not inside an executable section" in err, err
    assert ".text 0x1000.." in err, err
    assert_nothing_left(sup, run)


async def test_a_step_point_the_adapter_calls(tmp_path, loops):
    """step_point = "adapter": nothing patched for stepping; the adapter points the game's
    frame callback (its own hook) at host->step at attach, which runs before the game's
    first instruction. One step a frame, game time step_ms a frame."""
    data = null_recipe([loops_group(loops, ["--loop", "sleep", "--print", "120"], env={"W3P_STEP_HOOK": "1"},
                                    step_point="adapter")],
                       supervisor={"start_timeout_s": 60, "round_period_ms": 5}, stop={"steps": 150})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    freq, rows = frames(log)
    assert len(rows) >= 100 and stats["restarts"] == {}, log[-800:]
    for k, qpc, tick, _, _ in rows:  # frame k reads the clock before its step
        assert qpc == k * 50 * freq // 1000 and tick == k * 50, (k, qpc, tick)
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_step_point_never_reached_fails_the_slot_within_15_s_naming_it(tmp_path, loops):
    """Sleep is imported (the game's Sleep loop has it) but the busy PeekMessage loop
    never calls it: at the deadline (10 s by default) the game ends with exit 73 and a
    line naming the step point, and the slot is failed at once, with the recipe's
    default max_start_failures: one start, so the slot fails the deadline (10 s) plus
    one game start after it began, within 15 s."""
    group = loops_group(loops, ["--loop", "peek"], step_point="Sleep")
    data = null_recipe([group], supervisor={"start_timeout_s": 120}, stop={"seconds": 60})
    from w3async.runtime.runfolder import RunError
    from w3async.compose import supervisor

    run = tmp_path / "run"
    sup = supervisor(recipe_from_dict(data), run)
    assert sup.recipe.supervisor.max_start_failures > 1  # the default: the exit alone fails the slot
    with pytest.raises(RunError) as e:
        await sup.run()
    err = str(e.value)
    says = "the step point Sleep was not reached within 10000 ms (step_deadline_s)"
    assert "every game slot failed" in err and says in err and "Finding the step point" in err, err
    ev = events(run)
    assert [x["event"] for x in ev].count("game_start") == 1, ev
    assert not [x for x in ev if x["event"] == "game_restart"], ev
    exit_ = next(x for x in ev if x["event"] == "game_exit")
    assert exit_["returncode"] == 73 and exit_["cause"] == "inject", exit_
    assert next(x for x in ev if x["event"] == "slot_failed")
    assert_nothing_left(sup, run)


async def test_windowed_games_that_pause_on_focus_loss_all_keep_stepping(tmp_path, loops):
    """4 windowed games of one prefix, each pausing (WaitMessage, no frame) when its window
    loses the activation: each on a desktop of its own, none loses it, all step."""
    data = null_recipe([loops_group(loops, ["--loop", "peek", "--window", "--pause-inactive"], count=4,
                                    step_point="PeekMessageA", desktop="own")],
                       supervisor={"start_timeout_s": 120, "hang_timeout_s": 5}, stop={"seconds": 20})
    sup, stats = await run_recipe(data, tmp_path / "run")
    logs = game_logs(tmp_path / "run")
    assert stats["restarts"] == {}, {k: v[-400:] for k, v in logs.items()}
    assert all("WM_ACTIVATEAPP 0" not in log for log in logs.values()), logs
    for slot, log in logs.items():
        assert f"window created on desktop w3async-slot-{slot}" in log, log[-400:]
        m = re.search(r"w3hook: (\d+) steps;", log)  # the hook's count at the stop
        assert m and int(m.group(1)) >= 100, log[-400:]
    assert_nothing_left(sup, tmp_path / "run")


async def test_display_xvfb_gives_the_run_an_x_server_and_ends_it(tmp_path, loops):
    """[runtime] display = "xvfb": the run's own Xvfb, the x11 driver for the run, the
    window made on it; the server ends with the run, and the next run (display "null",
    the same prefix) is back on the null driver."""
    import shutil

    from w3async.procstat import alive

    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    group = loops_group(loops, ["--window", "--loop", "sleep"], step_point="Sleep")
    data = null_recipe([group], supervisor={"start_timeout_s": 60}, stop={"steps": 50}, runtime={"display": "xvfb"})
    sup, stats = await run_recipe(data, tmp_path / "run")
    log = game_logs(tmp_path / "run")[0]
    assert "loops: window created" in log and stats["agent_steps"] >= 50, log[-600:]
    rt = sup.runtimes["wine"]
    assert rt.xserver_pid and not alive(rt.xserver_pid), "the run's Xvfb outlived it"
    assert_nothing_left(sup, tmp_path / "run")
    sup, _ = await run_recipe(null_recipe([group], supervisor={"start_timeout_s": 60}, stop={"steps": 20}),
                              tmp_path / "run2")
    assert "loops: window created" in game_logs(tmp_path / "run2")[0]
    assert_nothing_left(sup, tmp_path / "run2")
