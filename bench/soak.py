"""Soak line (`make bench`): the supervisor's memory over minutes of null-game steps.

Runs the null recipe in this process and prints the supervisor's resident set size
after a warm-up and then every --every seconds, with agent steps so far. Flat memory
means no per-step allocation that grows over a run.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from w3async.recipes import recipe_from_dict  # noqa: E402
from w3async.compose import supervisor  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def soak(minutes: float, every: float, count: int, lanes: int) -> list[tuple[float, int, float]]:
    data = {"name": "soak", "game": "null",
            "games": [{"binary": str(REPO / "build/native/null_game"), "count": count, "lanes": lanes,
                       "env": {"W3N_EPISODES": "200"}}],  # recycles games too: restarts must not leak
            "supervisor": {"progress_s": 0}}
    run_dir = Path(tempfile.mkdtemp(prefix="w3a-soak-"))
    sup = supervisor(recipe_from_dict(data), run_dir)
    task = asyncio.create_task(sup.run())
    await asyncio.sleep(5.0)
    rows = [(0.0, sup.agent_steps, rss_mib())]
    t0 = time.monotonic()
    while time.monotonic() - t0 < minutes * 60:
        await asyncio.sleep(every)
        rows.append((time.monotonic() - t0, sup.agent_steps, rss_mib()))
    sup.request_stop()
    stats = await task
    shutil.rmtree(run_dir, ignore_errors=True)
    rows.append((-1.0, stats["agent_steps"], sum(s["restarts"] for s in stats["games"].values())))
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--every", type=float, default=30.0)
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--lanes", type=int, default=2)
    a = p.parse_args()
    import uvloop  # noqa: PLC0415

    rows = uvloop.run(soak(a.minutes, a.every, a.count, a.lanes))
    *samples, (_, steps, restarts) = rows
    print(f"soak: {a.count} null games x {a.lanes} lanes, {a.minutes:g} min, {steps:,} agent steps, "
          f"{restarts} recycles")
    print(f"{'t (s)':>8} {'agent steps':>14} {'supervisor RSS (MiB)':>21}")
    for t, s, rss in samples:
        print(f"{t:>8.0f} {s:>14,} {rss:>21.1f}")
    growth = samples[-1][2] - samples[0][2]
    print(f"RSS growth after warm-up: {growth:+.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
