"""Where the cores and the bytes go: per-process accounting of a run, sampled from /proc.

Every `supervisor.accounting_s` (2 s by default) a thread of the supervisor asks its
reader, a process of its own (observe/proc_sampler.py: its /proc reads would otherwise
trade the GIL with the loop a few hundred times a sample), for each process's CPU (user
and system ticks) and RSS. A game's figure is its process and every descendant (a helper
it forked, a `setsid` one included while it is still its child); Wine's wineserver and
its services (services.exe, winedevice.exe, explorer.exe, ...) are kinds of their own,
found by the WINEPREFIX in their environment (the run's prefixes), never a game's; the
supervisor's own threads are shown by role (the loop, and each other thread by its
Python name). CPU is in cores: the ticks over the sample divided by its seconds.

Each Wine prefix's synchronisation is read from its wineserver, not from the environment
passed: ntsync when it holds /dev/ntsync open, fsync when it maps a `wine-*-fsync`
segment, esync when it holds eventfds, else "server" (Wine 8.0 as Debian builds it has
none of the three: every wait is a request to the wineserver).

The latest sample is a plain dict (`latest()`), replaced whole each time: the status
server reads it from the snapshot. Over a group's `max_rss_mb` a game is reported to the
loop (`on_over_cap`), which recycles it with cause `memory`.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable

from w3async.observe.proc_sampler import KINDS
from w3async.pychild import python_child

__all__ = ["KINDS", "Accounted", "Accounting", "thread_roles"]


@dataclass(frozen=True)
class Accounted:
    """A game slot as the sampler needs it (read on its thread: plain values)."""

    slot: int
    pid: int | None  # the process the keeper started (the sandbox's, the launcher's): its tree is the game's
    max_rss_mb: float = 0.0  # 0: no cap
    steps: int = 0  # the agent steps of its rows since this start (the slot's sequence numbers summed)


class Accounting:
    """The sampling thread and its reader process; `latest()` is the last sample (None
    before the second)."""

    def __init__(self, games: Callable[[], list[Accounted]], prefixes: Callable[[], list[str]] = list,
                 interval_s: float = 2.0, on_over_cap: Callable[[int, int, float, float], None] | None = None,
                 on_sample: Callable[[dict], None] | None = None, threads: Callable[[], dict] | None = None,
                 ray: bool = False):
        """`games()`: the slots now, `prefixes()`: the run's Wine prefixes (both called on
        the sampler's thread); `on_over_cap(slot, pid, rss_mb, cap_mb)` and
        `on_sample(sample)` are called on it too (hand them to the loop); `threads()`:
        {native thread id: role} of this process; `ray`: count Ray's processes too (a run
        with game hosts)."""
        self.games, self.prefixes, self.interval_s = games, prefixes, interval_s
        self.on_over_cap, self.on_sample, self.threads, self.ray = on_over_cap, on_sample, threads, ray
        self._latest: dict | None = None
        self._steps: dict[int, tuple[int | None, int]] = {}  # slot -> (pid, steps) at the last sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reader: subprocess.Popen | None = None
        self.sample_ms = 0.0  # the last sample's wall time, request to reply
        self.error: str | None = None  # the reader's last failure (the run goes on without figures)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="accounting", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        r = self._reader
        if r is not None:
            r.stdin.close()  # the reader ends at the end of its input
            try:
                r.wait(5.0)
            except subprocess.TimeoutExpired:
                r.kill()
                r.wait()
            r.stdout.close()

    def latest(self) -> dict | None:
        return self._latest

    def _main(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as e:  # noqa: BLE001 (a figure missed is not a run lost: the next sample tries again)
                self.error = f"{type(e).__name__}: {e}"
            self._stop.wait(self.interval_s)

    def _ask(self, request: dict) -> dict:
        r = self._reader
        if r is None or r.poll() is not None:  # not started, or it died: a new one
            if r is not None:  # its pipes, or an fd pair leaks per dead reader
                for f in (r.stdin, r.stdout):
                    try:
                        f.close()
                    except OSError:  # a write it never read (BrokenPipeError at the flush)
                        pass
            # A session of its own: a Ctrl-C at the terminal (SIGINT to the foreground
            # process group) is the supervisor's to act on; the reader got it too and
            # printed a KeyboardInterrupt traceback. It ends when its stdin closes.
            r = self._reader = subprocess.Popen(
                python_child("w3async.observe.proc_sampler"), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, text=True, close_fds=True, start_new_session=True)
        r.stdin.write(json.dumps(request) + "\n")
        r.stdin.flush()
        line = r.stdout.readline()
        if not line:
            raise RuntimeError(f"the /proc reader ended (exit {r.wait()})")
        return json.loads(line)

    def sample(self) -> dict | None:
        """One sample (also kept as latest()); None on the first."""
        t0 = time.perf_counter()
        games = self.games()
        got = self._ask(dict(games=[[g.slot, g.pid] for g in games], prefixes=self.prefixes(), me=os.getpid(),
                             also=[self._reader.pid] if self._reader is not None else [], ray=self.ray))
        if got is None:
            return None
        if "error" in got:
            raise RuntimeError(got["error"])
        per_game = {int(k): v for k, v in got["games"].items()}
        roles = self.threads() if self.threads is not None else {}
        threads: dict[str, float] = {}
        for tid, cores in got.pop("threads").items():
            role = roles.get(int(tid), "other")
            threads[role] = round(threads.get(role, 0.0) + cores, 4)
        self.sample_ms = (time.perf_counter() - t0) * 1e3
        self._per_step(games, per_game, got["kinds"], got["interval_s"])
        sample = dict(got, games=per_game, threads=dict(sorted(threads.items())), t=time.time(),
                      sample_ms=round(self.sample_ms, 3))
        self._latest = sample
        for g in games:
            fig = per_game.get(g.slot)
            if g.max_rss_mb and fig and fig["rss_mb"] > g.max_rss_mb and self.on_over_cap is not None:
                self.on_over_cap(g.slot, g.pid, fig["rss_mb"], g.max_rss_mb)
        if self.on_sample is not None:
            self.on_sample(sample)
        return sample


    def _per_step(self, games: list[Accounted], per_game: dict, kinds: dict, interval_s: float) -> None:
        """CPU per agent step over the sample, `ms_per_step` (None: no step in it): each
        game's own, and each kind's over all the games' steps (Wine's server and services
        per step of the games they serve). A start new since the last sample made all its
        steps in this one, as all its CPU (proc_sampler.py)."""
        total, seen = 0, {}
        for g in games:
            pid, steps = self._steps.get(g.slot, (None, 0))
            made = g.steps - steps if pid == g.pid and g.steps >= steps else g.steps
            seen[g.slot] = (g.pid, g.steps)
            total += made
            fig = per_game.get(g.slot)
            if fig is not None:
                fig["ms_per_step"] = _ms(fig["cpu"], interval_s, made)
        self._steps = seen
        for fig in kinds.values():
            fig["ms_per_step"] = _ms(fig["cpu"], interval_s, total)


def _ms(cores: float, interval_s: float, steps: int) -> float | None:
    """CPU milliseconds a step: cores over interval_s, shared by steps (None: none)."""
    return round(cores * interval_s * 1e3 / steps, 4) if steps > 0 else None


def thread_roles(loop_tid: int) -> dict[int, str]:
    """{native thread id: role} of this process: the loop's thread, then each other by its
    Python name (the inference worker, the learner, the status server, ...); the
    loop's default executor's threads (asyncio_0, asyncio_1, ...) as one, `executor`."""
    roles = {t.native_id: ("executor" if t.name.startswith("asyncio_") else t.name)  # the loop's default executor's
             for t in threading.enumerate() if t.native_id is not None}                # one-off jobs, summed as one role
    roles[loop_tid] = "loop"
    return roles
