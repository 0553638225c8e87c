"""The adapter API's ABI 2 and 3 functions (shim/inject/hostapi.c, input.c, w3h.h; docs/hooking.md "The
adapter API") in a real injected game under Wine: tests/inject/hostapi_game.c, a
windowed program that prints every input message it gets, driven by
tests/inject/hostapi_adapter.c, which uses each function and sends a script of keys,
characters and mouse input. A draw call the hook does not know is turned off by its
argument size."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.shim.test_injection import game_logs, probe  # noqa: F401 (fixture)
from tests.runtime.test_supervisor import assert_nothing_left, null_recipe, run_recipe

pytestmark = pytest.mark.wine


@pytest.fixture(scope="module")
def hostapi(probe, mingw) -> dict[str, Path]:  # noqa: F811
    src, out = REPO / "tests" / "inject", probe["dir"]
    game, adapter = out / "hostapi_game.exe", out / "hostapi_adapter.dll"
    subprocess.run([mingw, "-O2", "-Wall", "-o", str(game), str(src / "hostapi_game.c"), "-lgdi32", "-ldinput8",
                    "-ldxguid"], check=True)
    subprocess.run([mingw, "-O2", "-Wall", "-shared", "-I", str(REPO / "shim"), "-I", str(REPO / "shim" / "inject"),
                    "-o", str(adapter), str(src / "hostapi_adapter.c")], check=True)
    return {"game": game, "adapter": adapter}


def hostapi_run(hostapi: dict, **inject) -> dict:
    group = {"binary": str(hostapi["game"]), "runtime": "wine", "count": 1, "lanes": 1, "sides": 1,
             "inject": {"adapter": str(hostapi["adapter"]), "step_point": "Sleep", "step_ms": 10, "timeout_s": 10,
                        **inject}}
    return null_recipe([group], supervisor={"start_timeout_s": 60, "policy": "random"}, stop={"steps": 60})


async def test_the_adapter_finds_the_window_checks_addresses_patches_imports_and_sends_a_players_input(tmp_path,
                                                                                                      hostapi):
    run = tmp_path / "run"
    sup, stats = await run_recipe(hostapi_run(hostapi, draw=False, draw_calls=["TextOutA@20=7"]), run)
    assert stats["bad_rows"] == 0 and stats["restarts"] == {}
    log = game_logs(run)[0]
    assert "adapter: find_window class 1, any 1, other class 0" in log, log
    assert ("adapter: check_address exe read 1, exe write 0, null 0, pages read 1, pages write 0, first page write 1, "
            "freed 0") in log, log
    assert "adapter: patch_import GetVersion 1 (the real one 1), from user32 0, not imported 0" in log, log
    # The game's own GetVersion before attach, the adapter's after; TextOutA's stub returns 7.
    versions = re.findall(r"version 0x([0-9a-f]{8}) textout (-?\d+)", log)
    assert versions[-1] == ("12345678", "7"), versions
    assert "adapter: script done" in log, log[-2000:]
    msgs = [(m[0], int(m[1], 16), int(m[2], 16)) for m in re.findall(r"msg (\w+) (0x[0-9a-f]+) (0x[0-9a-f]+)", log)]
    left = 0x4B << 16 | 1 << 24 | 1  # repeat 1, its scan code, the extended bit
    a, z = 0x1E << 16 | 1, 0x2C << 16 | 1
    assert msgs[:3] == [("WM_KEYDOWN", 0x25, left), ("WM_KEYDOWN", 0x25, left | 1 << 30),  # previous state: down
                        ("WM_KEYUP", 0x25, left | 1 << 30 | 1 << 31)], msgs
    # Pressed and released in one step: TranslateMessage's WM_CHAR comes after the posted key-up.
    assert msgs[3:6] == [("WM_KEYDOWN", 0x41, a), ("WM_KEYUP", 0x41, a | 3 << 30), ("WM_CHAR", ord("a"), a)], msgs
    assert msgs[6] == ("WM_CHAR", ord("z"), z), msgs
    at, at2 = 20 << 16 | 10, 21 << 16 | 11
    assert msgs[7:11] == [("WM_MOUSEMOVE", 0, at), ("WM_LBUTTONDOWN", 1, at),  # MK_LBUTTON after the change
                          ("WM_MOUSEMOVE", 1, at2), ("WM_LBUTTONUP", 0, at2)], msgs
    alt, x = 0x38 << 16 | 1 << 29 | 1, 0x2D << 16 | 1 << 29 | 1  # the context bit: Alt is down
    assert msgs[11:14] == [("WM_SYSKEYDOWN", 0x12, alt), ("WM_SYSKEYDOWN", 0x58, x),
                           ("WM_SYSKEYUP", 0x58, x | 3 << 30)], msgs
    assert msgs[14][0] == "WM_SYSKEYUP" and msgs[14][1] == 0x12 and msgs[14][2] >> 30 == 3, msgs
    taps = [m[0] for m in msgs if m[1] == 0x42 and m[0].startswith("WM_KEY")]
    assert taps == ["WM_KEYDOWN", "WM_KEYUP"], msgs  # host->tap('B'), its key-up a step later
    # The state the game polls agrees with the input given (before: the real state, which
    # posted messages never change): the held key, the pointer and its button, the key
    # pressed and released in one step (GetAsyncKeyState's "pressed since" bit), and the
    # tapped key down for one frame, in GetKeyboardState and GetKeyState alike.
    polls = re.findall(r"poll cursor (-?\d+) (-?\d+) left (\d) lbutton (\d) a-pressed (\d) b (\d)/(\d)", log)
    states = [tuple(map(int, p)) for p in polls]

    def first(pred, after=-1):
        return next(i for i, st in enumerate(states) if i > after and pred(st))

    left = first(lambda st: st[2] == 1)
    first(lambda st: st[2] == 0, left)
    a = first(lambda st: st[4] == 1, left)
    at = first(lambda st: st[:2] == (10, 20) and st[3] == 1, a)
    first(lambda st: st[:2] == (11, 21) and st[3] == 0, at)
    b = first(lambda st: st[5:] == (1, 1), at)
    first(lambda st: st[5:] == (0, 0), b)
    assert not [st for st in states if st[5] != st[6]], states
    assert_nothing_left(sup, run)


async def test_directinput_buffered_data_agrees_with_the_adapters_input(tmp_path, hostapi):
    """The same script read through a DirectInput 8 keyboard's and mouse's GetDeviceData
    (buffered): each key's transitions by DIK code (an auto-repeat none), the pointer's moves relative to the
    last (DIMOFS_X 0, DIMOFS_Y 4) and its button's (DIMOFS_BUTTON0 12), in order.
    Before: a mouse's buffered data was always empty."""
    run = tmp_path / "run"
    sup, stats = await run_recipe(hostapi_run(hostapi, args=["--dinput"]), run)
    log = game_logs(run)[0]
    assert "hostapi: dinput keyboard 1 mouse 1" in log, log[-2000:]
    assert "adapter: script done" in log, log[-2000:]
    keys = [(int(o), int(d)) for o, d in re.findall(r"di key (\d+) (-?\d+)", log)]
    left, a = 0xCB, 0x1E  # DIK_LEFT, DIK_A
    # A held key's auto-repeat is no transition: DirectInput reports none.
    assert keys[:4] == [(left, 0x80), (left, 0), (a, 0x80), (a, 0)], keys
    mouse = [(int(o), int(d)) for o, d in re.findall(r"di mouse (\d+) (-?\d+)", log)]
    assert mouse == [(0, 10), (4, 20), (12, 0x80), (0, 1), (4, 1), (12, 0)], mouse
    assert_nothing_left(sup, run)
