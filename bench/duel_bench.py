"""The duel game's own cost: steps/s and CPU ms per step, and instructions per step.

    .venv/bin/python bench/duel_bench.py [--steps N] [--no-wine] [--no-callgrind]

Rows (a step is one lane advancing one step of 20 turns, both sides' orders included;
both sides are ai:hard on the camps map, the dearest setup):
- native / wine, 1 process x 1 lane, alone;
- native / wine, 8 processes x 4 lanes at the same time (they share one measurement
  window: all start together, the window ends when the last one ends);
- instructions per step from valgrind's callgrind (repeatable on a noisy machine), with
  W3D_CUTS=0 and 7: the difference of a long and a short run, so start-up cancels.

CPU per step is the games' own (getrusage of the children; under Wine the game process's,
not the wineserver's). The simulation alone, no shared memory: the harness's costs are
bench/step_sync.py's business.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NATIVE = REPO / "build" / "native" / "duel"
EXE = REPO / "build" / "win64" / "duel.exe"
SIDES = ["--sides", "ai:hard,ai:hard", "--map", "camps"]


def run_group(cmds: list[list[str]], env: dict) -> tuple[float, float, list[dict]]:
    """Starts every command at once; returns the window's wall seconds, the children's
    CPU seconds (user + system) and each child's JSON line."""
    t0 = time.monotonic()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for c in cmds]
    cpu, outs = 0.0, []
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out = p.stdout.read().decode()
        if p.returncode != 0:
            raise SystemExit(f"duel_bench: {' '.join(p.args)} exited {p.returncode}")
        cpu += ru.ru_utime + ru.ru_stime
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return time.monotonic() - t0, cpu, outs


def throughput(label: str, cmd_of, env: dict, procs: int, lanes: int, steps: int) -> dict:
    cmds = [cmd_of(["--bench", *SIDES, "--lanes", str(lanes), "--steps", str(steps)]) for _ in range(procs)]
    wall, cpu, outs = run_group(cmds, env)
    total = sum(o["lane_steps"] for o in outs)
    own_ms = sum(o["cpu_ms_per_step"] * o["lane_steps"] for o in outs) / total
    return {"setup": label, "procs": procs, "lanes": lanes, "steps/s": total / wall,
            "cpu ms/step (process)": cpu * 1e3 / total, "cpu ms/step (sim)": own_ms}


def callgrind_ir(steps: int, cuts: int) -> float:
    """Instructions per lane step: (long run - short run) / (step difference)."""
    irs = []
    for n in (steps, 2 * steps):
        p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", str(NATIVE), "--bench",
                            *SIDES, "--lanes", "1", "--steps", str(n)],
                           env={**os.environ, "W3D_CUTS": str(cuts)}, capture_output=True, text=True, check=True)
        m = re.search(r"Collected : (\d+)", p.stderr)
        irs.append(int(m.group(1)))
    return (irs[1] - irs[0]) / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20000, help="steps per lane for the throughput rows")
    ap.add_argument("--cuts", type=int, default=7, help="W3D_CUTS for the throughput rows")
    ap.add_argument("--no-wine", action="store_true")
    ap.add_argument("--no-callgrind", action="store_true")
    a = ap.parse_args()
    subprocess.run(["make", "-s", "-C", "games/duel", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    env = {**os.environ, "W3D_CUTS": str(a.cuts)}
    load0 = os.getloadavg()[0]
    rows = [
        throughput("native", lambda args: [str(NATIVE), *args], env, 1, 1, a.steps),
        throughput("native", lambda args: [str(NATIVE), *args], env, 8, 4, a.steps // 4),
    ]
    wine_ok = not a.no_wine and EXE.exists() and (shutil.which("wine") or shutil.which("wine64"))
    if wine_ok:
        from w3async.runtime.wine import WineConfig, acquire_running_prefix

        with acquire_running_prefix(WineConfig()) as prefix:
            wenv = prefix.env({"W3D_CUTS": str(a.cuts)})
            # one throw-away start, so that the measured ones find the prefix's files cached
            run_group([prefix.command(str(EXE), ["--bench", *SIDES, "--steps", "10"])], wenv)
            rows.append(throughput("wine", lambda args: prefix.command(str(EXE), args), wenv, 1, 1, a.steps))
            rows.append(throughput("wine", lambda args: prefix.command(str(EXE), args), wenv, 8, 4, a.steps // 4))
    else:
        print("duel_bench: Wine rows skipped (no wine, no duel.exe, or --no-wine)")
    # steps/s depends on what else the machine runs; CPU per step and instructions do not
    print(f"duel, ai:hard vs ai:hard on camps, W3D_CUTS={a.cuts}, {os.cpu_count()} CPUs, "
          f"load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{'setup':8} {'procs x lanes':>13} {'steps/s':>10} {'cpu ms/step':>12} {'sim ms/step':>12}")
    for r in rows:
        print(f"{r['setup']:8} {r['procs']:>6} x {r['lanes']:<4} {r['steps/s']:>10.0f} "
              f"{r['cpu ms/step (process)']:>12.4f} {r['cpu ms/step (sim)']:>12.4f}")
    if not a.no_callgrind and shutil.which("valgrind"):
        ir0, ir7 = callgrind_ir(300, 0), callgrind_ir(300, 7)
        print(f"instructions per step (callgrind): W3D_CUTS=0 {ir0 / 1e3:.0f} k, W3D_CUTS=7 {ir7 / 1e3:.0f} k "
              f"({100 * (ir7 - ir0) / ir0:+.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
