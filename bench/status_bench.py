"""The status server: what a request and a rebuild cost, and what clients take from the rounds.

    .venv/bin/python bench/status_bench.py [--episodes 100 100000] [--requests 200]
                                           [--games 8] [--window 5] [--pairs 3] [--clients 100]

1. Cost. For each size: a run folder whose episodes.jsonl holds that many episodes (and
   a second of inference and an update per 10 episodes), a StatusServer over it (its
   own thread) on a real TCP port: the one-off first read of the files; then the
   rebuild the server thread does once a sample (one new episode line, tail, /status
   and /games built) and per request (median and p95 over --requests): GET /status, /,
   /series, /metrics (answers are bytes built at most once a sample).
2. Load. One null-game run (--games processes, 2 lanes; the status server on its
   thread, sampling every second) measured in windows of --window s: no clients, then
   --clients clients polling /status as fast as they can, then 20 clients polling
   /replay/latest (the viewer's data: a duel replay with states in replays/), --pairs
   times over. The clients are asyncio loops in 4 other processes (started before a
   window, not counted in it). Agent steps/s per kind of window, its ratio to the
   no-client windows of the same run, the answers the clients got, and the CPU seconds
   a second of the server thread and of the client processes. The goal: with 100
   clients, steps/s within 10% of no clients.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.observe.test_status import T0, line  # noqa: E402 (the docs/logs.md line writer)
from w3async.observe.http_limits import Limits  # noqa: E402
from w3async.observe.status import StatusServer  # noqa: E402

LEVELS = ("ai:easy", "ai:normal", "ai:hard")
CLIENT_PROCS = 4
UNLIMITED = Limits(ip_rate=1e6, ip_burst=10**6, total_rate=1e6, total_burst=10**6)  # part 1 measures cost, not limits


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
                         steps=400, policy_version=i // 50, **{"return": 1.0}))
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
        server = StatusServer(run_dir=run, sample_s=3600, limits=UNLIMITED)
        t = time.perf_counter()
        port = await server.start()  # the thread's first build reads every file
        out = {"first": time.perf_counter() - t}
        base = f"http://127.0.0.1:{port}"
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(base + "/status") as r:
                    st = await r.json()
                assert st["episodes"]["total"] == n, st["episodes"]
                times = []
                for i in range(requests):
                    with open(run / "episodes.jsonl", "a") as f:
                        f.write(line(T0 + 2.0 * n + i, "episode", slot=0, lane=0, side=0, opponent="ai:easy",
                                     eval=True, result="win", steps=400, policy_version=1))
                    t = time.perf_counter()
                    await server.refresh_now()
                    times.append(time.perf_counter() - t)
                times.sort()
                out["rebuild"] = (statistics.median(times), times[int(0.95 * (len(times) - 1))])
                for path in ("/status", "/", "/series", "/metrics"):
                    times = []
                    for i in range(requests):
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


# ---- load: a real run, with and without clients -------------------------------------------

CLIENT = """
import asyncio, sys, aiohttp
url, n = sys.argv[1], int(sys.argv[2])
counts = {}
async def client(s):
    while True:
        try:
            async with s.get(url) as r:
                await r.read()
                counts[r.status] = counts.get(r.status, 0) + 1
        except aiohttp.ClientError:
            counts["error"] = counts.get("error", 0) + 1
            await asyncio.sleep(0.1)
async def main():
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        tasks = [asyncio.create_task(client(s)) for _ in range(n)]
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(repr(counts), flush=True)
asyncio.run(main())
"""


def cpu_s(path: str) -> float:
    """utime + stime of /proc/<path>/stat, in seconds."""
    try:
        f = open(f"/proc/{path}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class Clients:
    """n clients polling url, in CLIENT_PROCS processes."""

    def __init__(self, url: str, n: int):
        self.url, self.n = url, n

    async def __aenter__(self):
        per = [self.n // CLIENT_PROCS + (i < self.n % CLIENT_PROCS) for i in range(CLIENT_PROCS)]
        self.procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, self.url, str(k),
                                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
                      for k in per if k]
        return self

    def cpu(self) -> float:
        return sum(cpu_s(str(p.pid)) for p in self.procs)

    async def __aexit__(self, *exc):
        self.counts: dict = {}
        for p in self.procs:
            out, _ = await p.communicate(b"")
            for k, v in eval(out.decode() or "{}").items():  # noqa: S307 (our own children's dicts)
                self.counts[k] = self.counts.get(k, 0) + v


def record_replay(path: Path) -> None:
    duel = REPO / "build" / "native" / "duel"
    if not duel.exists():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(duel), "--record", str(path), "--sides", "ai:normal,ai:hard", "--states", "--max-steps",
                    "2000", "--map", "choke"], check=True, capture_output=True)


async def load(games: int, window: float, pairs: int, n_clients: int, limits: Limits | None) -> dict:
    from w3async.recipes import recipe_from_dict  # noqa: PLC0415
    from w3async.compose import supervisor  # noqa: PLC0415

    os.environ.setdefault("W3ASYNC_SHM_PREFIX", f"/w3a-sb{os.getpid()}-")
    d = Path(tempfile.mkdtemp(prefix="status-bench-"))
    run = d / "run"
    record_replay(run / "replays" / "eval-0001.w3dr")
    data = {"name": "statusbench", "game": "null",
            "games": [{"binary": str(REPO / "build" / "native" / "null_game"), "count": games, "lanes": 2, "nice": 10}],
            "supervisor": {"progress_s": 0}, "status": {"enabled": False}, "stop": {"seconds": 0}}
    sup = supervisor(recipe_from_dict(data), run)
    await sup.setup()  # its parts exist from set-up on (the watch among them)
    server = StatusServer(sup.watch.status_source(), sample_s=1.0, limits=limits)
    await server.start()
    task = asyncio.create_task(sup.run())
    kinds = [("no clients", None, 0), (f"{n_clients} x /status", "status", n_clients),
             ("20 x /replay/latest", "replay/latest", 20)]
    res = {k: dict(rates=[], answers={}, server_cpu=[], client_cpu=[], seconds=0.0) for k, _, _ in kinds}
    tid = None
    try:
        await asyncio.sleep(3.0)  # the games up and stepping
        tid = server.thread.native_id
        for _ in range(pairs):
            for name, path, n in kinds:
                r = res[name]
                clients = Clients(server.url + path, n) if n else None
                if clients:
                    await clients.__aenter__()
                await asyncio.sleep(1.5)  # the clients connected and polling
                s0, t0, c0 = sup.agent_steps, time.monotonic(), cpu_s(f"self/task/{tid}")
                k0 = clients.cpu() if clients else 0.0
                await asyncio.sleep(window)
                dt = time.monotonic() - t0
                r["rates"].append((sup.agent_steps - s0) / dt)
                r["server_cpu"].append((cpu_s(f"self/task/{tid}") - c0) / dt)
                r["client_cpu"].append(((clients.cpu() - k0) / dt) if clients else 0.0)
                r["seconds"] += dt
                if clients:
                    await clients.__aexit__(None, None, None)
                    for k, v in clients.counts.items():
                        r["answers"][k] = r["answers"].get(k, 0) + v
                    r["seconds"] += 1.5
                if task.done():
                    raise RuntimeError(f"the run ended: {task.result()}")
    finally:
        sup.request_stop()
        await task
        await server.stop()
        shutil.rmtree(d, ignore_errors=True)
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--episodes", type=int, nargs="+", default=[100, 100_000])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--games", type=int, default=8)
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--clients", type=int, default=100)
    p.add_argument("--unlimited", action="store_true", help="no request-rate limit (what the limit buys)")
    args = p.parse_args()
    cols = ("rebuild", "/status", "/", "/series", "/metrics")
    print(f"{'episodes':>9} | {'first read':>10} | " + " | ".join(f"{x:>16}" for x in cols)
          + "   (ms: median / p95; rebuild: one new episode, then what the server thread does once a sample)")
    for n in args.episodes:
        r = asyncio.run(bench(n, args.requests))
        cells = " | ".join(f"{1e3 * r[x][0]:7.2f} / {1e3 * r[x][1]:6.2f}" for x in cols)
        print(f"{n:>9,} | {1e3 * r['first']:8.0f}ms | {cells}")
    if args.pairs <= 0:
        return 0
    print()
    print(f"null run, {args.games} games x 2 lanes, {os.cpu_count()} CPUs; windows of {args.window:g} s, "
          f"{args.pairs} of each kind, interleaved; clients in {CLIENT_PROCS} processes"
          + ("; NO request-rate limit" if args.unlimited else ""))
    res = asyncio.run(load(args.games, args.window, args.pairs, args.clients, UNLIMITED if args.unlimited else None))
    base = statistics.mean(res["no clients"]["rates"])
    print(f"{'clients':>20} | {'agent steps/s':>13} | {'windows':>26} | {'ratio':>5} | {'answers/s 200 / 429':>19} | "
          f"{'server thread CPU':>17} | {'client CPU':>10}")
    for name, r in res.items():
        mean = statistics.mean(r["rates"])
        ans = r["answers"]
        secs = r["seconds"] or 1.0
        answers = f"{ans.get(200, 0) / secs:8.0f} / {ans.get(429, 0) / secs:5.0f}" if ans else "-"
        if ans.get("error"):
            answers += f" ({ans['error']} errors)"
        print(f"{name:>20} | {mean:13,.0f} | {' '.join(f'{x / 1e3:.0f}k' for x in r['rates']):>26} | "
              f"{mean / base:5.2f} | {answers:>19} | {statistics.mean(r['server_cpu']):15.3f} s | "
              f"{statistics.mean(r['client_cpu']):8.2f} s")
    ratio = statistics.mean(res[f"{args.clients} x /status"]["rates"]) / base
    print(f"goal: with {args.clients} clients, steps/s within 10% of no clients: "
          + ("held" if ratio >= 0.9 else "MISSED") + f" ({ratio:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
