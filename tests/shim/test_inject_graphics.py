"""Drawing by name (shim/inject/com.c, patch.c, docs/hooking.md "Direct3D" and "OpenGL"):
games that draw through a Direct3D 9 or 8 device's methods (tests/inject/d3d9_game.c), a
Direct3D 11 context and a DXGI swap chain (tests/inject/d3d11_game.c), or
through OpenGL functions that only wglGetProcAddress gives (tests/inject/gl_game.c),
knowing nothing of w3async, are stepped at their present and have their drawing turned
off from the recipe alone, with no method-table code in their adapter (the probe's),
and their simulation is the same drawn or not, 64- and 32-bit."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, need
from tests.shim.test_injection import _probe_adapter, game_logs, probe, probe_group  # noqa: F401 (fixture)
from tests.runtime.test_supervisor import assert_nothing_left, but_lost, events, lost_starts, null_recipe, run_recipe

pytestmark = pytest.mark.wine

D3D9_DRAW = ["IDirect3DDevice9::Present", "IDirect3DDevice9::Clear", "IDirect3DDevice9::BeginScene",
             "IDirect3DDevice9::EndScene", "IDirect3DDevice9::DrawPrimitiveUP"]
CLEARED = "0xff336699"  # the games' clear colour, read back where the clear drew and nothing over it
# glClear stays on: the pixel then tells whether glDrawRangeElements drew (its triangle's red).
GL_DRAW = ["glDrawRangeElements@24", "SwapBuffers"]
TRIANGLE = "0xffff0000"


D3D8_DRAW = [c.replace("9", "8") for c in D3D9_DRAW]
D3D11_DRAW = ["IDXGISwapChain::Present", "ID3D11DeviceContext::ClearRenderTargetView", "ID3D11DeviceContext::Draw"]


def graphics_game(probe: dict, name: str, bits: int, request, libs: list[str], source: str = "") -> Path:  # noqa: F811
    out = probe["dir"] / f"{name}{bits}.exe"
    if not out.exists():
        cc = request.getfixturevalue("mingw" if bits == 64 else "mingw32")
        subprocess.run([cc, "-O2", "-Wall", "-o", str(out), str(REPO / f"tests/inject/{source or name}.c"), *libs,
                        "-lwinmm"], check=True)
    return out


def d3d9_game(probe: dict, bits: int, request) -> Path:  # noqa: F811
    return graphics_game(probe, "d3d9_game", bits, request, ["-ld3d9"])


async def _run(tmp_path: Path, probe: dict, bits: int, request, draw: bool, name: str, *,  # noqa: F811
               exe: Path, step_point: str, draw_calls: list[str], args: tuple = ()) -> tuple[str, dict]:
    group = probe_group(probe, args=["--ticks", "600", "--readback", *args], step_point=step_point,
                        step_ms=48, draw=draw, draw_calls=draw_calls, adapter=_probe_adapter(probe, bits, request))
    group["binary"] = str(exe)
    data = null_recipe([group], runtime={"display": "xvfb"}, supervisor={"start_timeout_s": 60}, stop={"seconds": 12})
    sup, stats = await run_recipe(data, tmp_path / name)
    log = game_logs(tmp_path / name)[0]
    assert_nothing_left(sup, tmp_path / name)
    # the restarts but a start lost before the game ran (lost_starts) and one whose device
    # Wine and llvmpipe could not make (device_not_made): not this test's subject
    passing = lost_starts(tmp_path / name) + device_not_made(tmp_path / name)
    return log, {**stats, "restarts": but_lost(stats["restarts"], passing)}


def device_not_made(run_dir: Path, most: int = 1) -> list[dict]:
    """The game_exit events of starts whose game said, in a message box before its first
    post, that its device or context could not be made: Wine's desktop process, started
    by the game, once in a few hundred starts fails to start ("failed to map the shared
    user data: c0000018", then "failed to start explorer"), and without a desktop wined3d
    has no window for its GL context (DXGI_ERROR_UNSUPPORTED). The supervisor restarts
    such a start of a slot that already ran (docs/faults.md). A test about drawing allows
    `most` and names them if there are more."""
    boxes = [e for e in events(run_dir) if e["event"] == "game_exit" and e["cause"] == "message_box"
             and not e["posted"] and re.search(r"could (not )?be (created|made)", e["stderr"])]
    assert len(boxes) <= most, boxes
    return boxes


def first_start_that_ran(log: str, made: str) -> str:
    """The output of the run's first start whose game made its device ("" if none did)."""
    return next((out for out in re.split(r"^--- start \d+ .*$", log, flags=re.M)[1:] if made in out), "")


def _same_simulation_drawn_or_not(runs: dict, tag: str, made: str, drawn_pixel: str) -> None:
    """Each run's first start that ran (first_start_that_ran): the game made its device,
    read back drawn_pixel only when
    drawing was on, stepped once a frame (3 ticks of 16 ms in a 48 ms step: 600 ticks in
    ~200 steps) and ended with the same simulation hash drawn or not."""
    hashes = {}
    for draw, (log, stats) in runs.items():
        first = first_start_that_ran(log, made)
        assert made in first, log[-800:]
        pixel = re.search(rf"{tag}: pixel (0x[0-9a-f]+)", first)
        assert pixel and (pixel.group(1) == drawn_pixel) == draw, (draw, first[-800:])
        m = re.search(rf"{tag}: ticks 600 hash ([0-9a-f]+) passes (\d+)", first)
        assert m, (draw, first[-800:])
        hashes[draw] = m.group(1)
        assert 190 <= int(m.group(2)) <= 210, (draw, m.group(0))
        assert stats["agent_steps"] >= 190 and set(stats["restarts"]) <= {"recycle"}, (draw, stats["restarts"])
    assert hashes[True] == hashes[False], hashes


@pytest.mark.parametrize("bits", [64, 32])
async def test_a_direct3d9_games_drawing_is_turned_off_by_name_and_its_simulation_is_the_same(tmp_path, probe,
                                                                                              request, bits):
    if bits == 32:
        request.getfixturevalue("wine32")
    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    exe = d3d9_game(probe, bits, request)
    runs = {draw: await _run(tmp_path, probe, bits, request, draw, f"draw-{draw}", exe=exe,
                             step_point="IDirect3DDevice9::Present", draw_calls=D3D9_DRAW) for draw in (True, False)}
    _same_simulation_drawn_or_not(runs, "d3d9", "d3d9: device made", CLEARED)


@pytest.mark.parametrize("bits", [64, 32])
async def test_a_direct3d8_games_drawing_is_turned_off_by_name(tmp_path, probe, request, bits):
    """The same game built for Direct3D 8 (Direct3DCreate8 imported on i386, looked up by
    GetProcAddress on x86-64): IDirect3DDevice8's methods by name, Present the step point."""
    if bits == 32:
        request.getfixturevalue("wine32")
    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    libs = ["-DGAME_D3D8"] + (["-ld3d8"] if bits == 32 else [])
    exe = graphics_game(probe, "d3d8_game", bits, request, libs, source="d3d9_game")
    runs = {draw: await _run(tmp_path, probe, bits, request, draw, f"draw-{draw}", exe=exe,
                             step_point="IDirect3DDevice8::Present", draw_calls=D3D8_DRAW) for draw in (True, False)}
    _same_simulation_drawn_or_not(runs, "d3d8", "d3d8: device made", CLEARED)


@pytest.mark.parametrize("bits", [64, 32])
async def test_an_opengl_games_drawing_through_wglgetprocaddress_is_turned_off_by_name(tmp_path, probe, request, bits):
    """glDrawRangeElements, which the game gets from wglGetProcAddress (no import table
    holds it), is a no-op from the recipe's draw_calls; SwapBuffers is the step point.
    Before: wglGetProcAddress gave the game the real function, drawn whatever the recipe."""
    if bits == 32:
        request.getfixturevalue("wine32")
    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    exe = graphics_game(probe, "gl_game", bits, request, ["-lopengl32", "-lgdi32"])
    runs = {draw: await _run(tmp_path, probe, bits, request, draw, f"draw-{draw}", exe=exe, step_point="SwapBuffers",
                             draw_calls=GL_DRAW) for draw in (True, False)}
    _same_simulation_drawn_or_not(runs, "gl", "gl: context made", TRIANGLE)


@pytest.mark.parametrize("bits,how", [(64, "chain"), (64, "factory"), (32, "chain")])
async def test_a_direct3d11_games_swap_chain_and_context_are_hooked_by_name(tmp_path, probe, request, bits, how):
    """IDXGISwapChain::Present the step point and ClearRenderTargetView off by name, for a
    swap chain made with its device (D3D11CreateDeviceAndSwapChain) and for one made
    later by the device's own DXGI factory (found through the device, as engines make
    theirs). Before: neither could be named."""
    if bits == 32:
        request.getfixturevalue("wine32")
    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    exe = graphics_game(probe, "d3d11_game", bits, request, ["-ld3d11", "-ldxgi", "-ldxguid"])
    args = ("--factory",) if how == "factory" else ()
    runs = {draw: await _run(tmp_path, probe, bits, request, draw, f"draw-{draw}", exe=exe, args=args,
                             step_point="IDXGISwapChain::Present", draw_calls=D3D11_DRAW) for draw in (True, False)}
    _same_simulation_drawn_or_not(runs, "d3d11", "d3d11: device made", CLEARED)
