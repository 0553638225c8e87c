"""Direct3D 9 by name (shim/inject/com.c, docs/hooking.md "Direct3D"): a game that
draws through a device's methods (tests/inject/d3d9_game.c, which knows nothing of
w3async) is stepped at IDirect3DDevice9::Present and has its drawing turned off from
the recipe alone, with no method-table code in its adapter (the probe's), and its
simulation is the same drawn or not, 64- and 32-bit."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO, need
from .test_injection import _probe_adapter, game_logs, probe, probe_group  # noqa: F401 (fixture)
from .test_supervisor import assert_nothing_left, events, null_recipe, run_recipe

pytestmark = pytest.mark.wine

D3D9_DRAW = ["IDirect3DDevice9::Present", "IDirect3DDevice9::Clear", "IDirect3DDevice9::BeginScene",
             "IDirect3DDevice9::EndScene", "IDirect3DDevice9::DrawPrimitiveUP"]
CLEARED = "0xff336699"  # the game's clear colour, read back when its Clear drew


def d3d9_game(probe: dict, bits: int, request) -> Path:  # noqa: F811
    out = probe["dir"] / f"d3d9_game{bits}.exe"
    if not out.exists():
        cc = request.getfixturevalue("mingw" if bits == 64 else "mingw32")
        subprocess.run([cc, "-O2", "-Wall", "-o", str(out), str(REPO / "tests/inject/d3d9_game.c"), "-ld3d9", "-lwinmm"],
                       check=True)
    return out


async def _run(tmp_path: Path, probe: dict, bits: int, request, draw: bool, name: str) -> tuple[str, dict]:  # noqa: F811
    group = probe_group(probe, args=["--ticks", "600", "--readback"], step_point="IDirect3DDevice9::Present",
                        step_ms=48, draw=draw, draw_calls=D3D9_DRAW, adapter=_probe_adapter(probe, bits, request))
    group["binary"] = str(d3d9_game(probe, bits, request))
    data = null_recipe([group], runtime={"display": "xvfb"}, supervisor={"start_timeout_s": 60}, stop={"seconds": 12})
    sup, stats = await run_recipe(data, tmp_path / name)
    log = game_logs(tmp_path / name)[0]
    assert_nothing_left(sup, tmp_path / name)
    return log, stats


@pytest.mark.parametrize("bits", [64, 32])
async def test_a_direct3d9_games_drawing_is_turned_off_by_name_and_its_simulation_is_the_same(tmp_path, probe,
                                                                                              request, bits):
    if bits == 32:
        request.getfixturevalue("wine32")
    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    runs = {draw: await _run(tmp_path, probe, bits, request, draw, f"draw-{draw}") for draw in (True, False)}
    hashes = {}
    for draw, (log, stats) in runs.items():
        first = log.split("--- start 1 ", 1)[0]  # the first start's output
        assert "d3d9: device made" in first, log[-800:]
        pixel = re.search(r"d3d9: pixel (0x[0-9a-f]+)", first)
        assert pixel and (pixel.group(1) == CLEARED) == draw, (draw, first[-800:])
        m = re.search(r"d3d9: ticks 600 hash ([0-9a-f]+) passes (\d+)", first)
        assert m, (draw, first[-800:])
        hashes[draw] = m.group(1)
        # Present is the step point: a step a frame, 3 ticks (16 ms) of 48 ms game time each.
        assert 190 <= int(m.group(2)) <= 210, (draw, m.group(0))
        assert stats["agent_steps"] >= 190 and set(stats["restarts"]) <= {"recycle"}, (draw, stats["restarts"])
    assert hashes[True] == hashes[False], hashes
