"""The accounting's reader of /proc, in a process of its own (observe/accounting.py).

    python -m w3async.observe.proc_sampler      # one JSON request a line on stdin, one reply a line

A request names the run's processes: {"games": [[slot, pid], ...], "prefixes": [...],
"me": the supervisor's pid, "also": [its helpers' pids], "ray": a run with game hosts}. The reply: each game's CPU
(user and system, in cores over the time since the last request) and RSS with every
descendant; the same by kind (`games`, `wineserver`, `wine-services`, `supervisor`, and
`ray` for a run with game hosts: Ray's daemons and workers); the
supervisor's threads' cores by thread id; each Wine prefix's sync. Reading /proc takes a
few hundred system calls a sample: in the supervisor's process each would hand the GIL
back and forth with the loop (a 2 s sample cost 2.5% of the steps, and 114 ms of wall
time); here they cost the loop nothing.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

from w3async.procstat import environ, read_stat

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
WINE_SERVICES = ("services.exe", "winedevice.exe", "plugplay.exe", "explorer.exe", "rpcss.exe", "svchost.exe",
                 "conhost.exe", "wineboot.exe", "winemenubuilder", "tabtip.exe", "start.exe")
KINDS = ("games", "wineserver", "wine-services", "supervisor", "ray")
RAY_DAEMONS = ("raylet", "gcs_server")


@dataclass
class _Proc:
    ppid: int
    comm: str
    ticks_user: int
    ticks_sys: int
    rss_mb: float
    start: int  # ticks since boot: a pid reused is another process


def read_procs() -> dict[int, _Proc]:
    """Every process's /proc/<pid>/stat, in one pass."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        got = read_stat(f"/proc/{name}/stat")
        if got is None or len(got[1]) < 22:
            continue
        comm, fields = got
        out[int(name)] = _Proc(ppid=int(fields[1]), comm=comm, ticks_user=int(fields[11]), ticks_sys=int(fields[12]),
                               rss_mb=int(fields[21]) * PAGE_MB, start=int(fields[19]))
    return out


def _env_value(pid: int, key: bytes) -> str | None:
    for item in environ(pid).split(b"\0"):
        if item.startswith(key + b"="):
            return item[len(key) + 1:].decode(errors="replace")
    return None


def wine_sync(pid: int) -> str:
    """The synchronisation a wineserver uses, from what it holds: 'ntsync', 'fsync',
    'esync' or 'server'."""
    eventfds = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target == "/dev/ntsync":
                return "ntsync"
            eventfds += target == "anon_inode:[eventfd]"
        with open(f"/proc/{pid}/maps") as f:
            if any("-fsync" in line and "/dev/shm/wine-" in line for line in f):
                return "fsync"
    except OSError:
        return "unknown"
    return "esync" if eventfds else "server"




class ProcSampler:
    """What one sample needs of the last: each process's ticks, the threads', the Wine
    processes' prefixes and the wineservers' syncs (by pid and start time)."""

    def __init__(self):
        self._last: tuple[float, dict[int, tuple[int, int, int]], dict[int, int]] | None = None
        self._prefix_of: dict[tuple[int, int], str | None] = {}  # (pid, start) -> its WINEPREFIX
        self._sync: dict[tuple[int, int], str] = {}  # a wineserver's (pid, start) -> its sync
        self._ray: dict[tuple[int, int], bool] = {}  # (pid, start) -> one of Ray's processes

    def sample(self, games: list[tuple[int, int | None]], prefixes: list[str], me: int, also: list[int],
               ray: bool = False) -> dict | None:
        """The figures since the last call (None on the first)."""
        now = time.monotonic()
        procs = read_procs()
        tasks = _read_tasks(me)
        ticks = {pid: (p.start, p.ticks_user, p.ticks_sys) for pid, p in procs.items()}
        last = self._last
        self._last = (now, ticks, tasks)
        if last is None:
            return None
        dt = max(now - last[0], 1e-6)

        def cores(pid: int) -> tuple[float, float]:
            start, u, s = ticks[pid]
            before = last[1].get(pid)
            if before is None or before[0] != start:  # new since the last sample: all its ticks are in this one
                return u * TICK_S / dt, s * TICK_S / dt
            return (u - before[1]) * TICK_S / dt, (s - before[2]) * TICK_S / dt

        out = self._figures(procs, cores, games, set(prefixes), [me, *also], ray)
        out["threads"] = {tid: round((t - last[2].get(tid, 0)) * TICK_S / dt, 4) for tid, t in tasks.items()}
        out["interval_s"] = round(dt, 3)
        return out

    def _figures(self, procs, cores, games, prefixes, mine, ray: bool) -> dict:
        children: dict[int, list[int]] = {}
        for pid, p in procs.items():
            children.setdefault(p.ppid, []).append(pid)
        kinds = {k: dict(cpu=0.0, cpu_user=0.0, cpu_sys=0.0, rss_mb=0.0, procs=0) for k in KINDS}
        wine_kind: dict[int, str] = {}
        servers: dict[str, dict] = {}
        if prefixes:
            for pid, p in procs.items():
                if p.comm.startswith("wineserver") or p.comm in WINE_SERVICES:
                    pf = self._prefix(pid, p.start)
                    if pf in prefixes:
                        wine_kind[pid] = "wineserver" if p.comm.startswith("wineserver") else "wine-services"
                        if wine_kind[pid] == "wineserver":
                            key = (pid, p.start)
                            if key not in self._sync:
                                self._sync[key] = wine_sync(pid)
                            servers[pf] = dict(prefix=pf, wineserver_pid=pid, sync=self._sync[key])
        per_game = {}
        for slot, root in games:
            fig = dict(cpu=0.0, cpu_user=0.0, cpu_sys=0.0, rss_mb=0.0, procs=0)
            todo = [root] if root in procs else []
            while todo:
                pid = todo.pop()
                todo += children.get(pid, ())
                if pid in wine_kind:
                    continue  # Wine's own, counted as its kind
                _add(fig, cores(pid), _rss_mb(pid, procs[pid]))
            per_game[slot] = _rounded(fig)
            _add_fig(kinds["games"], fig)
        for pid, kind in wine_kind.items():
            _add(kinds[kind], cores(pid), _rss_mb(pid, procs[pid]))
        for pid in mine:  # the supervisor and its helpers (this sampler)
            if pid in procs:
                _add(kinds["supervisor"], cores(pid), _rss_mb(pid, procs[pid]))
        if ray:  # a run with game hosts: Ray's daemons and workers (the hosts' own processes among them)
            for pid, p in procs.items():
                if pid not in mine and self._is_ray(pid, p):
                    _add(kinds["ray"], cores(pid), _rss_mb(pid, p))
            self._ray = {k: v for k, v in self._ray.items() if k[0] in procs}
        self._prefix_of = {k: v for k, v in self._prefix_of.items() if k[0] in procs}
        return dict(games=per_game, kinds={k: _rounded(v) for k, v in kinds.items()},
                    prefixes=sorted(servers.values(), key=lambda s: s["prefix"]))

    def _is_ray(self, pid: int, p: _Proc) -> bool:
        """raylet, gcs_server, a `ray::` worker, or a Python process running Ray's code
        (its dashboard, log monitor, agents): read once per process."""
        key = (pid, p.start)
        if key not in self._ray:
            hit = p.comm in RAY_DAEMONS or p.comm.startswith("ray::")
            if not hit and p.comm.startswith("python"):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        hit = b"/ray/" in f.read()
                except OSError:
                    hit = False
            self._ray[key] = hit
        return self._ray[key]

    def _prefix(self, pid: int, start: int) -> str | None:
        key = (pid, start)
        if key not in self._prefix_of:
            self._prefix_of[key] = _env_value(pid, b"WINEPREFIX")
        return self._prefix_of[key]


def _rss_mb(pid: int, p: _Proc) -> float:
    """A counted process's RSS from /proc/<pid>/statm, as VmRSS gives it: stat's own
    field is the kernel's per-CPU approximation (Linux 6.x), off by up to a few hundred
    KiB a process, 9% of a 5 MiB game of 4 processes here. Read only for the processes
    counted (a few dozen), stat's figure if it is gone meanwhile."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE_MB
    except (OSError, IndexError, ValueError):
        return p.rss_mb


def _read_tasks(pid: int) -> dict[int, int]:
    """A process's threads: {tid: user + system ticks}."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        got = read_stat(f"/proc/{pid}/task/{tid}/stat")
        try:
            out[int(tid)] = int(got[1][11]) + int(got[1][12])
        except (TypeError, IndexError, ValueError):  # gone (None), or short
            continue
    return out


def _add(fig: dict, cpu: tuple[float, float], rss_mb: float) -> None:
    fig["cpu_user"] += cpu[0]
    fig["cpu_sys"] += cpu[1]
    fig["cpu"] += cpu[0] + cpu[1]
    fig["rss_mb"] += rss_mb
    fig["procs"] += 1


def _add_fig(total: dict, fig: dict) -> None:
    for k in total:
        total[k] += fig[k]


def _rounded(fig: dict) -> dict:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in fig.items()}




def main() -> int:
    """Answer each request line with a reply line until stdin closes (the supervisor ended)."""
    sampler = ProcSampler()
    for line in sys.stdin:
        try:
            req = json.loads(line)
            out = sampler.sample([tuple(g) for g in req["games"]], req["prefixes"], req["me"], req.get("also", []),
                                 bool(req.get("ray")))
        except Exception as e:  # noqa: BLE001 (said to the supervisor, which keeps running)
            out = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
