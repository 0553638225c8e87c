"""Injection's cost: the injected duel against the linked duel under Wine, and drawing's CPU.

In one invocation, in interleaved windows (linked, injected, injected drawing, linked,
...), each window a fresh run of the supervisor in this process (uvloop, the random
policy) on the same games and lanes:

- linked: `build/win64/duel.exe`, the duel built against the shim, under Wine;
- injected: `build/win64/duel_rt.exe`, the unmodified real-time duel, through the
  launcher with the hook and the duel's adapter (recipes/duel-injected.toml's
  settings), drawing off (draw = false, draw_calls FillRect, Ellipse, Rectangle, BitBlt);
- injected, drawing: the same with draw = true (its GDI drawing into a memory bitmap
  every frame);
- pong, pong drawing: the reference Pong (games/pong, recipes/pong-injected.toml: a
  busy PeekMessage loop, one match a process, so its figures include the restarts),
  drawing off and on;
- snake, snake drawing: the reference Snake (games/snake, recipes/snake-injected.toml:
  a GetMessage loop on WM_TIMER), drawing off and on;
- march, march drawing: the reference March (games/march, recipes/march-injected.toml:
  a pacing thread, Direct3D 9 stepped at IDirect3DDevice9::Present and drawn off by
  name, DirectInput 8, background threads; display = "xvfb"), drawing off and on.

The game-time ratio is game time over wall time per game: agent steps/s a game times
the game time a step covers (the duel 1000 ms, pong one 16 ms frame, snake one 100 ms
tick). That is the in-game measure too: the reference games' tests read game time
inside the game at each episode end (host->game_time_ms) and find exactly a frame
(pong) or a tick (snake) a step; they also log the wall time there
(KUSER_SHARED_DATA's interrupt time), whose ratio includes each process's start-up.

Every run: N processes x 1 lane, sides = 1 (W3D_SIDES agent,ai:easy), the same time
limit. After every slot has posted and a warm-up, a window of --window seconds is
measured: agent steps/s, and the CPU time (utime + stime, /proc) of the processes
carrying the run's marker (its table's name, in W3S_SHM_PATH: the games, the
launchers, the prefix's services, and the prefix's wineserver, which the run's first
game starts), sampled every 0.5 s, per agent step, in three columns: the game
processes (duel.exe / duel_rt.exe / the reference game), the wineserver, the desktops
(explorer.exe), the rest of the prefix (the launchers, services.exe, ...), and with
display = "xvfb" the run's X server. The target: injected >= 80% of
the linked duel's agent steps/s.

    python bench/inject_bench.py                     # 3 windows of each kind, 12 s each
    python bench/inject_bench.py --pairs 4 --window 15 --games 4
    python bench/inject_bench.py --only pong,snake,march   # the reference games alone
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from w3async.recipes import recipe_from_dict  # noqa: E402
from w3async.runtime import procs  # noqa: E402
from w3async.runtime.slots import SlotState  # noqa: E402

WIN64 = REPO / "build" / "win64"
TIME_LIMIT = "6000"  # turns, both games
DRAW_CALLS = ["FillRect", "Ellipse", "Rectangle", "BitBlt"]
KINDS = ("linked", "injected", "injected, drawing", "pong", "pong, drawing", "snake", "snake, drawing", "march",
         "march, drawing")
STEP_MS = {"linked": 1000, "injected": 1000, "pong": 16, "snake": 100, "march": 50}  # game time a step
GAME_OF = {"linked": "duel", "injected": "duel"}  # kind (less ", drawing") -> --only's name
REF_DRAW_CALLS = {"pong": ["FillRect", "Rectangle", "Ellipse", "BitBlt", "TextOutA@20", "LineTo@12", "MoveToEx@16"],
                  "snake": ["FillRect", "BitBlt", "TextOutA@20"],
                  "march": ["IDirect3DDevice9::Present", "IDirect3DDevice9::Clear", "IDirect3DDevice9::BeginScene",
                            "IDirect3DDevice9::EndScene", "IDirect3DDevice9::DrawPrimitiveUP"]}
STEP_POINT = {"pong": "PeekMessageA", "snake": "GetMessageA", "march": "IDirect3DDevice9::Present"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def recipe(kind: str, games: int, window_s: float) -> dict:
    """One run's recipe: kind's games, 1 lane and 1 agent side each, the random policy."""
    env = {"W3D_SIDES": "agent,ai:easy", "W3D_REWARD": "shaped", "W3D_TIME_LIMIT": TIME_LIMIT}
    group = {"binary": str(WIN64 / "duel.exe"), "runtime": "wine", "count": games, "lanes": 1, "sides": 1,
             "env": env}
    base = kind.split(",")[0]
    if base in REF_DRAW_CALLS:  # the reference games: their recipes' settings
        group = {"binary": str(WIN64 / f"{base}.exe"), "runtime": "wine", "count": games, "lanes": 1, "sides": 1,
                 "inject": {"adapter": str(WIN64 / f"{base}_adapter.dll"), "step_ms": STEP_MS[base],
                            "step_point": STEP_POINT[base],
                            "args": ["--seed", "{seed}", "--points", "11"] if base == "pong" else [],
                            "draw": kind.endswith("drawing"), "draw_calls": REF_DRAW_CALLS[base],
                            "addresses_file": str(WIN64 / f"{base}.addresses.toml")}}
        return {"name": "inject-bench", "game": "null", "games": [group],
                "runtime": {"display": "xvfb" if base == "march" else "null"},
                "supervisor": {"policy": "random", "progress_s": 0, "start_timeout_s": 90}, "stop": {"seconds": 0}}
    if kind != "linked":
        group["binary"] = str(WIN64 / "duel_rt.exe")
        group["inject"] = {"adapter": str(WIN64 / "duel_adapter.dll"),
                           "args": ["--sides", "human,ai:easy", "--seed", "{seed}", "--lane", "{lane}",
                                    "--time-limit", TIME_LIMIT, "--quiet"],
                           "step_point": "Sleep", "step_ms": 1000, "draw": kind == "injected, drawing",
                           "draw_calls": DRAW_CALLS}
    return {"name": "inject-bench", "game": "duel", "games": [group],
            "supervisor": {"policy": "random", "progress_s": 0, "start_timeout_s": 90},
            "stop": {"seconds": 0}}


def cpu_by_process(marker: bytes, prefixes: list[str] = ()) -> dict[int, tuple[str, float]]:
    """pid -> (its program, utime + stime in seconds) of every live process carrying marker,
    or of one of prefixes (the wineserver and the prefix's services carry no game's marker)."""
    out = {}
    pids = set(procs.mentioning(marker)) | {p for pf in prefixes for p in procs.with_env("WINEPREFIX", pf)}
    for pid in pids:
        f = procs.stat_fields(pid)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if f and len(f) > 12:
            out[pid] = (comm, (int(f[11]) + int(f[12])) / CLK_TCK)
    return out


COLUMNS = ("game", "wineserver", "desktop", "prefix", "xvfb")


def column(comm: str) -> str:
    if comm.startswith("wineserver"):
        return "wineserver"
    if comm in ("duel.exe", "duel_rt.exe", "pong.exe", "snake.exe", "march.exe"):
        return "game"
    return "desktop" if comm == "explorer.exe" else "prefix"


def x_server(sup) -> dict[int, tuple[str, float]]:
    """The run's Xvfb (display = "xvfb"), which carries no marker: pid -> ("Xvfb", its CPU s)."""
    pids = [getattr(rt, "xserver_pid", 0) for rt in sup.runtimes.values()]
    out = {}
    for pid in filter(None, pids):
        f = procs.stat_fields(pid)
        if f and len(f) > 12:
            out[pid] = ("Xvfb", (int(f[11]) + int(f[12])) / CLK_TCK)
    return out


async def window(kind: str, games: int, warm_s: float, window_s: float) -> dict:
    """One fresh run of kind; the figures of its measured window."""
    from w3async.compose import supervisor  # noqa: PLC0415

    run_dir = Path(tempfile.mkdtemp(prefix="w3a-injbench-"))
    sup = supervisor(recipe_from_dict(recipe(kind, games, window_s)), run_dir / "run")
    task = asyncio.create_task(sup.run())
    try:
        t, seen = time.monotonic(), set()
        # Every slot has posted once (pong's slots recycle every match: never all at once).
        while not (sup.slots and len(seen) == len(sup.slots)):
            seen |= {i for i, s in enumerate(sup.slots) if s.state == SlotState.RUNNING}
            if task.done() or time.monotonic() - t > 120:
                raise RuntimeError(f"{kind}: the games did not all post within 120 s")
            await asyncio.sleep(0.2)
        await asyncio.sleep(warm_s)
        marker = sup.table.name.lstrip("/").encode()
        prefixes = [p for rt in sup.runtimes.values() for p in rt.prefixes()]
        first: dict[int, tuple[str, float]] = {**cpu_by_process(marker, prefixes), **x_server(sup)}
        last = dict(first)
        steps0, t0 = sup.agent_steps, time.monotonic()
        while time.monotonic() - t0 < window_s:
            await asyncio.sleep(0.5)
            last.update({**cpu_by_process(marker, prefixes), **x_server(sup)})  # a process that ends keeps its last sample
        steps, dt = sup.agent_steps - steps0, time.monotonic() - t0
        restarts = sum(s.restarts for s in sup.slots)
    finally:
        sup.request_stop()
        stats = await task
        shutil.rmtree(run_dir, ignore_errors=True)
    cpu = dict.fromkeys(COLUMNS, 0.0)
    for pid, (comm, s) in last.items():
        cpu["xvfb" if comm == "Xvfb" else column(comm)] += s - first.get(pid, (comm, 0.0))[1]
    left = getattr(sup, "leftovers", None) or {}
    return dict(kind=kind, games=games, steps_s=steps / dt, steps=steps, cpu=cpu, restarts=restarts, bad_rows=stats["bad_rows"],
                left=bool(left.get("processes") or left.get("wine")))


async def bench(pairs: int, games: int, warm_s: float, window_s: float, kinds: tuple[str, ...]) -> list[dict]:
    out = []
    for k in range(pairs):
        for kind in kinds:
            r = await window(kind, games, warm_s, window_s)
            print(f"  window {k + 1}/{pairs} {kind:<18} {r['steps_s']:>10,.0f} agent steps/s  "
                  f"game {1e6 * r['cpu']['game'] / max(r['steps'], 1):6.1f} us/step", flush=True)
            out.append(r)
    return out


def table(rows: list[dict], kinds: tuple[str, ...]) -> None:
    by = {k: [r for r in rows if r["kind"] == k] for k in kinds}
    linked = statistics.median(r["steps_s"] for r in by["linked"]) if by.get("linked") else None
    print()
    print("| game | agent steps/s (median) | windows | ratio to linked | game time / wall, a game | game us/step "
          "| wineserver us/step | desktop us/step | rest of prefix us/step | Xvfb us/step | restarts | bad rows |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in kinds:
        rs = by[kind]
        if not rs:
            continue
        med = statistics.median(r["steps_s"] for r in rs)
        steps = sum(r["steps"] for r in rs)
        us = {c: 1e6 * sum(r["cpu"][c] for r in rs) / max(steps, 1) for c in COLUMNS}
        ratio = f"{med / linked:.2f}" if linked and kind.split(",")[0] in GAME_OF else ""
        game_time = med / rs[0]["games"] * STEP_MS[kind.split(",")[0]] / 1000
        wins = " ".join(f"{r['steps_s'] / 1000:.1f}k" for r in rs)
        print(f"| {kind} | {med:,.0f} | {wins} | {ratio} | {game_time:,.1f}x | {us['game']:.1f} | {us['wineserver']:.1f} | "
              f"{us['desktop']:.1f} | {us['prefix']:.1f} | {us['xvfb']:.1f} | {sum(r['restarts'] for r in rs)} | "
              f"{sum(r['bad_rows'] for r in rs)} |")
    print()
    for off_kind, on_kind in (("injected", "injected, drawing"), ("pong", "pong, drawing"), ("snake", "snake, drawing"),
                              ("march", "march, drawing")):
        on, off = by.get(on_kind), by.get(off_kind)
        if not (on and off):
            continue
        per = {name: sum(r["cpu"]["game"] for r in rs) / max(sum(r["steps"] for r in rs), 1)
               for name, rs in (("on", on), ("off", off))}
        if per["on"]:
            print(f"drawing, {off_kind}: the game's CPU per step {1e6 * per['on']:.1f} us on, {1e6 * per['off']:.1f} us "
                  f"off (drawing off saves {100 * (1 - per['off'] / per['on']):.0f}%)")
    off = by.get("injected")
    if linked:
        inj = statistics.median(r["steps_s"] for r in off) if off else 0
        print(f"target: injected >= 80% of linked: {inj / linked:.1%} "
              f"({'met' if inj >= 0.8 * linked else 'MISSED'})")
    if any(r["left"] for r in rows):
        print("WARNING: a run's shutdown reported leftovers")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=3, help="windows of each kind, interleaved")
    ap.add_argument("--window", type=float, default=12.0, help="seconds measured per window")
    ap.add_argument("--warm", type=float, default=2.0, help="seconds after every game posted, before the window")
    ap.add_argument("--games", type=int, default=4, help="game processes (1 lane, 1 agent side each)")
    ap.add_argument("--no-draw", action="store_true", help="skip the drawing-on windows")
    ap.add_argument("--only", default="duel,pong,snake,march",
                    help="the games measured (a comma list of duel, pong, snake, march)")
    a = ap.parse_args()
    if not (shutil.which("wine") or shutil.which("wine64")):
        print("inject_bench: wine is missing (apt-get install wine64): not run")
        return 0
    only = set(a.only.split(","))
    parts = ["w3inject.exe", "w3hook.dll"] + (["duel.exe", "duel_rt.exe", "duel_adapter.dll"] if "duel" in only else [])
    parts += [f"{g}{x}" for g in ("pong", "snake", "march") if g in only
              for x in (".exe", "_adapter.dll", ".addresses.toml")]
    missing = [x for x in parts if not (WIN64 / x).exists()]
    if missing:
        print(f"inject_bench: {', '.join(missing)} not built (make build with mingw-w64): not run")
        return 0
    kinds = tuple(k for k in KINDS if GAME_OF.get(k.split(",")[0], k.split(",")[0]) in only
                  and not (a.no_draw and k.endswith("drawing")))
    import uvloop  # noqa: PLC0415

    print(f"inject_bench: {a.games} Wine processes x 1 lane x 1 agent side (agent vs ai:easy), random policy, "
          f"{a.pairs} x {len(kinds)} interleaved windows of {a.window:g} s; load {os.getloadavg()[0]:.2f}", flush=True)
    rows = uvloop.run(bench(a.pairs, a.games, a.warm, a.window, kinds))
    table(rows, kinds)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
