"""Where the cores and the bytes go: per-process accounting of a run, sampled from /proc.

A thread of its own (never the loop) reads /proc once a sample (every
`supervisor.accounting_s`, 2 s by default): each process's CPU (user and system ticks)
and RSS. A game's figure is its process and every descendant (a helper it forked, a
`setsid` one included while it is still its child); Wine's wineserver and its services
(services.exe, winedevice.exe, explorer.exe, ...) are kinds of their own, found by the
WINEPREFIX in their environment (the run's prefixes), never a game's; the supervisor's
own threads are shown by role (the loop, and each other thread by its Python name).
CPU is in cores: the ticks over the sample divided by its seconds.

Each Wine prefix's synchronisation is read from its wineserver, not from the environment
passed: ntsync when it holds /dev/ntsync open, fsync when it maps a `wine-*-fsync`
segment, esync when it holds eventfds, else "server" (Wine 8.0 as Debian builds it has
none of the three: every wait is a request to the wineserver).

The latest sample is a plain dict (`latest()`), replaced whole each time: the status
server reads it from the snapshot. Over a group's `max_rss_mb` a game is reported to the
loop (`on_over_cap`), which recycles it with cause `memory`.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
PAGE_MB = os.sysconf("SC_PAGE_SIZE") / 2**20
WINE_SERVICES = ("services.exe", "winedevice.exe", "plugplay.exe", "explorer.exe", "rpcss.exe", "svchost.exe",
                 "conhost.exe", "wineboot.exe", "winemenubuilder", "tabtip.exe", "start.exe")
KINDS = ("games", "wineserver", "wine-services", "supervisor")


@dataclass(frozen=True)
class Accounted:
    """A game slot as the sampler needs it (read on its thread: plain values)."""

    slot: int
    pid: int | None  # the process the keeper started (the sandbox's, the launcher's): its tree is the game's
    max_rss_mb: float = 0.0  # 0: no cap


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
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        head, _, tail = raw.rpartition(b")")
        fields = tail.split()
        if len(fields) < 22:
            continue
        out[int(name)] = _Proc(ppid=int(fields[1]), comm=head.partition(b"(")[2].decode(errors="replace"),
                               ticks_user=int(fields[11]), ticks_sys=int(fields[12]),
                               rss_mb=int(fields[21]) * PAGE_MB, start=int(fields[19]))
    return out


def _env_value(pid: int, key: bytes) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(key + b"="):
                    return item[len(key) + 1:].decode(errors="replace")
    except OSError:
        pass
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


class Accounting:
    """The sampler thread; `latest()` is its last sample (None before the second)."""

    def __init__(self, games: Callable[[], list[Accounted]], prefixes: Callable[[], list[str]] = list,
                 interval_s: float = 2.0, on_over_cap: Callable[[int, int, float, float], None] | None = None,
                 on_sample: Callable[[dict], None] | None = None, threads: Callable[[], dict] | None = None):
        """`games()`: the slots now, `prefixes()`: the run's Wine prefixes (both called on
        the sampler's thread); `on_over_cap(slot, pid, rss_mb, cap_mb)` and
        `on_sample(sample)` are called on it too (hand them to the loop); `threads()`:
        {native thread id: role} of this process."""
        self.games, self.prefixes, self.interval_s = games, prefixes, interval_s
        self.on_over_cap, self.on_sample, self.threads = on_over_cap, on_sample, threads
        self._latest: dict | None = None
        self._last: tuple[float, dict[int, tuple[int, int, int]], dict[int, int]] | None = None
        self._prefix_of: dict[tuple[int, int], str | None] = {}  # (pid, start) -> its WINEPREFIX
        self._sync: dict[tuple[int, int], str] = {}  # a wineserver's (pid, start) -> its sync
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sample_ms = 0.0  # what the last sample cost (its own CPU: the sampler thread's)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="accounting", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def latest(self) -> dict | None:
        return self._latest

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001 (a figure missed is not a run lost: the next sample tries again)
                pass
            self._stop.wait(self.interval_s)

    def sample(self) -> dict | None:
        """One pass over /proc; the sample (also kept as latest()), None on the first."""
        t0 = time.perf_counter()
        now = time.monotonic()
        procs = read_procs()
        tasks = _read_tasks()
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

        sample = self._figures(procs, cores, tasks, last[2], dt)
        sample.update(t=time.time(), interval_s=round(dt, 3))
        self.sample_ms = (time.perf_counter() - t0) * 1e3
        sample["sample_ms"] = round(self.sample_ms, 3)
        self._latest = sample
        if self.on_sample is not None:
            self.on_sample(sample)
        return sample

    def _figures(self, procs, cores, tasks, tasks_before, dt) -> dict:
        children: dict[int, list[int]] = {}
        for pid, p in procs.items():
            children.setdefault(p.ppid, []).append(pid)
        games = self.games()
        prefixes = set(self.prefixes())
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
        for g in games:
            fig = dict(cpu=0.0, cpu_user=0.0, cpu_sys=0.0, rss_mb=0.0, procs=0)
            todo = [g.pid] if g.pid in procs else []
            while todo:
                pid = todo.pop()
                todo += children.get(pid, ())
                if pid in wine_kind:
                    continue  # Wine's own, counted as its kind
                _add(fig, cores(pid), procs[pid].rss_mb)
            per_game[g.slot] = _rounded(fig)
            _add_fig(kinds["games"], fig)
            if g.max_rss_mb and fig["rss_mb"] > g.max_rss_mb and self.on_over_cap is not None:
                self.on_over_cap(g.slot, g.pid, fig["rss_mb"], g.max_rss_mb)
        for pid, kind in wine_kind.items():
            _add(kinds[kind], cores(pid), procs[pid].rss_mb)
        me = os.getpid()
        if me in procs:
            _add(kinds["supervisor"], cores(me), procs[me].rss_mb)
        roles = self.threads() if self.threads is not None else {}
        threads: dict[str, float] = {}
        for tid, t in tasks.items():
            used = t - tasks_before.get(tid, 0) if tid in tasks_before else t
            role = roles.get(tid, "other")
            threads[role] = threads.get(role, 0.0) + used * TICK_S / dt
        self._prefix_of = {k: v for k, v in self._prefix_of.items() if k[0] in procs}
        return dict(games=per_game, kinds={k: _rounded(v) for k, v in kinds.items()},
                    threads={k: round(v, 4) for k, v in sorted(threads.items())},
                    prefixes=sorted(servers.values(), key=lambda s: s["prefix"]))

    def _prefix(self, pid: int, start: int) -> str | None:
        key = (pid, start)
        if key not in self._prefix_of:
            self._prefix_of[key] = _env_value(pid, b"WINEPREFIX")
        return self._prefix_of[key]


def _read_tasks() -> dict[int, int]:
    """This process's threads: {tid: user + system ticks}."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            out[int(tid)] = int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
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


def thread_roles(loop_tid: int) -> dict[int, str]:
    """{native thread id: role} of this process: the loop's thread, then each other by its
    Python name (the inference worker, the learner, the status server, ...)."""
    roles = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
    roles[loop_tid] = "loop"
    return roles
