"""Game hosts through Ray (`make bench`): the same null games as one local group and on
two simulated hosts, in one run; and what a row costs on the wire.

1. Local: --count null games of --lanes x 2 rows, answered with the check policy, in
   this process; agent steps/s over --seconds after a warm-up.
2. Cluster: the same games split over two game hosts of a cluster simulated on this
   machine (cluster.local_nodes = 2); the same window; each host's steps/s and the
   round trip its rows see (sent to answered, on the host's clock).
3. The wire: bytes a row costs (wire.pack) for null rows as gathered, and for rows
   with 16, 48 and 160 entities (a duel row has up to 48).

On one machine the hosts share its cores with the centre and Ray's own processes: the
cluster line is the overhead of the path, not a speed-up (that needs more machines).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from w3async.cluster import wire  # noqa: E402
from w3async.cluster.link import ClusterLink  # noqa: E402
from w3async.recipes import recipe_from_dict  # noqa: E402
from w3async.compose import supervisor  # noqa: E402
from w3async.sync import layout  # noqa: E402
from w3async.sync.gather import Batch  # noqa: E402


def recipe(count: int, lanes: int, hosts: int) -> dict:
    group = {"binary": str(REPO / "build/native/null_game"), "lanes": lanes, "env": {"W3N_CHECK": "1"}}
    d = {"name": "clbench", "game": "null", "supervisor": {"policy": "check", "progress_s": 0},
         "status": {"enabled": False}}
    if not hosts:
        d["games"] = [dict(group, count=count)]
        return d
    d["games"] = [dict(group, count=count // hosts, host=f"node{i + 1}") for i in range(hosts)]
    d["cluster"] = {"local_nodes": hosts}
    return d


async def measure(data: dict, seconds: float, warm_s: float) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="w3a-clbench-"))
    sup = supervisor(recipe_from_dict(data), run_dir, cluster=ClusterLink)
    task = asyncio.create_task(sup.run())
    t_start = time.monotonic()
    want = sum(g["count"] for g in data["games"])
    while True:  # every game up and answering, then the warm-up
        await asyncio.sleep(0.5)
        hosts = sup.cluster.hosts() if sup.cluster is not None else []
        up = sum(h["games_up"] for h in hosts) + sum(s.state == "running" for s in sup.slots)
        if up >= want and sup.agent_steps > 0:
            break
        if task.done() or time.monotonic() - t_start > 180:
            raise SystemExit(f"the run did not start its {want} games: {task.exception() if task.done() else ''}")
    start_s = time.monotonic() - t_start
    await asyncio.sleep(warm_s)
    s0, t0 = sup.agent_steps, time.monotonic()
    h0 = {h["name"]: h["agent_steps"] for h in (sup.cluster.hosts() if sup.cluster else [])}
    rts: dict[str, list] = {n: [] for n in h0}
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(0.5)
        for h in sup.cluster.hosts() if sup.cluster else []:
            if h["round_trip_ms"] is not None:
                rts[h["name"]].append(h["round_trip_ms"])
    dt = time.monotonic() - t0
    out = dict(steps_per_s=(sup.agent_steps - s0) / dt, start_s=start_s, hosts={})
    for h in sup.cluster.hosts() if sup.cluster else []:
        out["hosts"][h["name"]] = dict(steps_per_s=(h["agent_steps"] - h0[h["name"]]) / dt,
                                       rt_ms=float(np.median(rts[h["name"]])) if rts[h["name"]] else float("nan"),
                                       bytes_per_row=h["bytes_per_row"])
    sup.request_stop()
    stats = await task
    out["bad_rows"] = stats["bad_rows"]
    shutil.rmtree(run_dir, ignore_errors=True)
    return out


def wire_bytes(n_ent: int, rows: int = 32) -> float:
    b = Batch(rows)
    b.n, b.bucket = rows, min(x for x in (32, 48, 64, 96, 128, 160) if x >= max(n_ent, 1))
    b.n_ent[:rows] = n_ent
    return wire.nbytes(wire.pack(b, np.zeros(rows, np.uint32))) / rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--warm", type=float, default=5.0)
    p.add_argument("--count", type=int, default=4)
    p.add_argument("--lanes", type=int, default=2)
    a = p.parse_args()
    if importlib.util.find_spec("ray") is None:
        print("cluster_bench: ray is not installed (pip install -e '.[cluster]'; make bench does)")
        return 1
    local = asyncio.run(measure(recipe(a.count, a.lanes, 0), a.seconds, a.warm))
    cl = asyncio.run(measure(recipe(a.count, a.lanes, 2), a.seconds, a.warm))
    rows = a.count * a.lanes * 2
    print(f"\n{a.count} null games x {a.lanes} lanes x 2 sides ({rows} rows), check policy, "
          f"{a.seconds:.0f} s after a {a.warm:.0f} s warm-up")
    print("| placement | agent steps/s | vs local | round trip per host (median of 0.5 s samples) | start (s) |")
    print("| --- | ---: | ---: | --- | ---: |")
    print(f"| one local group | {local['steps_per_s']:,.0f} | 1.00x | - | {local['start_s']:.1f} |")
    per = ", ".join(f"{n}: {h['steps_per_s']:,.0f} steps/s, {h['rt_ms']:.2f} ms" for n, h in cl["hosts"].items())
    print(f"| two simulated hosts | {cl['steps_per_s']:,.0f} | {cl['steps_per_s'] / local['steps_per_s']:.2f}x | "
          f"{per} | {cl['start_s']:.1f} |")
    print(f"bad rows: local {local['bad_rows']}, cluster {cl['bad_rows']}")
    print("\n| a row on the wire | bytes |")
    print("| --- | ---: |")
    for name, h in cl["hosts"].items():
        print(f"| null rows as gathered ({name}) | {h['bytes_per_row']:,.0f} |")
    for k in (16, 48, layout.E_MAX):
        print(f"| {k} entities | {wire_bytes(k):,.0f} |")
    print(f"| (a row in the shared table) | {layout.ROW_SIZE:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
