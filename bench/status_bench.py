"""Status server response times at 100 and 100,000 recorded episodes.

    .venv/bin/python bench/status_bench.py [--episodes 100 100000] [--requests 200]

For each size: a run folder whose episodes.jsonl holds that many episodes (and a
second of inference and an update per 10 episodes), a StatusServer over it on a real
TCP port, the one-off first read of the files, then per request (median and p95 over
--requests, each after one new episode line is appended, as in a live run): GET
/status, GET / (the page), GET /series (the plots' data) and GET /metrics. The
original system's page took 4.5 s at 135k episodes; here a refresh should not grow
with the episodes at all.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.test_status import T0, line  # noqa: E402 (the docs/logs.md line writer)
from w3async.status import StatusServer  # noqa: E402

LEVELS = ("ai:easy", "ai:normal", "ai:hard")


def write_run(run: Path, n: int) -> None:
    run.mkdir(parents=True)
    (run / "events.jsonl").write_text(line(T0, "run_start", run=run.name, recipe="bench", pid=0, games=16)
                                      + "".join(line(T0, "game_start", slot=s, pid=1000 + s, runtime="native",
                                                     rows=[4 * s, 4 * s + 4], start=0) for s in range(16)))
    span = max(n * 2.0, 60.0)  # an episode every 2 s of run time
    with open(run / "episodes.jsonl", "w") as f:
        for i in range(n):
            ev = i % 5 == 0
            f.write(line(T0 + span * i / n, "episode", slot=i % 16, lane=i % 2, side=0,
                         opponent=LEVELS[i % 3] if ev else "self", eval=ev, result=("win", "loss", "draw")[i % 3],
                         steps=400, policy_version=i // 50, replay=None, **{"return": 1.0}))
    with open(run / "inference.jsonl", "w") as f:
        for i in range(max(n // 10, 1)):
            f.write(line(T0 + span * i / max(n // 10, 1), "rounds", rounds=900, rows=7000, rows_per_round=7.8,
                         latency_ms_mean=1.1, latency_ms_p95=2.4, compute_ms_mean=0.4, buckets={"32": 900},
                         learner_phase="idle"))
    with open(run / "learner.jsonl", "w") as f:
        for i in range(max(n // 10, 1)):
            f.write(line(T0 + span * i / max(n // 10, 1), "update", update=i + 1, update_s=1.5, wait_s=0.2,
                         staleness=1.0, policy_loss=-0.01, value_loss=0.3, entropy=1.8, approx_kl=0.004, lr=3e-4,
                         steps=4096))


async def bench(n: int, requests: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "run"
        write_run(run, n)
        server = StatusServer(run_dir=run, sample_s=3600)
        port = await server.start()
        base = f"http://127.0.0.1:{port}"
        out = {}
        try:
            async with aiohttp.ClientSession() as s:
                t = time.perf_counter()
                async with s.get(base + "/status") as r:
                    st = await r.json()
                out["first"] = time.perf_counter() - t
                assert st["episodes"]["total"] == n, st["episodes"]
                for path in ("/status", "/", "/series", "/metrics"):
                    times = []
                    for i in range(requests):
                        with open(run / "episodes.jsonl", "a") as f:
                            f.write(line(T0 + 2.0 * n + i, "episode", slot=0, lane=0, side=0, opponent="ai:easy",
                                         eval=True, result="win", steps=400, policy_version=1, replay=None))
                        t = time.perf_counter()
                        async with s.get(base + path) as r:
                            await r.read()
                            assert r.status == 200
                        times.append(time.perf_counter() - t)
                    times.sort()
                    out[path] = (statistics.median(times), times[int(0.95 * (len(times) - 1))])
        finally:
            await server.stop()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, nargs="+", default=[100, 100_000])
    p.add_argument("--requests", type=int, default=200)
    args = p.parse_args()
    print(f"{'episodes':>9} | {'first read':>10} | " + " | ".join(f"{x:>16}" for x in ("/status", "/", "/series", "/metrics"))
          + "   (ms: median / p95 per request, one new episode before each)")
    for n in args.episodes:
        r = asyncio.run(bench(n, args.requests))
        cells = " | ".join(f"{1e3 * r[x][0]:7.2f} / {1e3 * r[x][1]:6.2f}" for x in ("/status", "/", "/series", "/metrics"))
        print(f"{n:>9,} | {1e3 * r['first']:8.0f}ms | {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
