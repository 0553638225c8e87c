"""What a run shows while it runs: the status server, the per-process accounting
(observe/accounting.py), inference.jsonl's round lines once a second, and the console's
progress line.

`RunWatch` starts and stops the status server (observe/status.py) and the accounting,
and runs the two once-a-while tasks the supervisor starts with the games. It is given
what it uses: the run's context, the slots and runtimes, the counters, the keeper (a
game over its memory cap is killed), the answerer (its round lines and progress), the
cluster link, the supervisor's stats() and its start time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable

from w3async.observe.accounting import Accounted, Accounting, thread_roles
from w3async.observe.logs import console
from w3async.runtime.answerer import Answerer, Counters
from w3async.runtime.keeper import GameKeeper
from w3async.runtime.life import RunContext
from w3async.runtime.runfolder import RunError


class RunWatch:
    """The status server and the periodic lines of one run."""

    def __init__(self, ctx: RunContext, *, slots: list, runtimes: dict, counters: Counters, keeper: GameKeeper,
                 answerer: Answerer, cluster, stats: Callable[[], dict], started: float):
        self.ctx, self.slots, self.runtimes, self.counters = ctx, slots, runtimes, counters
        self.keeper, self.answerer, self.cluster, self._stats, self._started = keeper, answerer, cluster, stats, started
        self.status_server = None  # observe.status.StatusServer while it serves
        self.accounting: Accounting | None = None  # the /proc sampler while the run runs
        self._event_at = 0.0
        self._syncs_said: set[tuple[str, int]] = set()

    # ---- accounting ----------------------------------------------------------------

    def start_accounting(self) -> None:
        """Sample the games', Wine's and our own CPU and memory (supervisor.accounting_s)."""
        c = self.ctx
        every = c.recipe.supervisor.accounting_s
        if not every:
            return
        loop, loop_tid, slots = c.loop, threading.get_native_id(), self.slots

        def games() -> list[Accounted]:  # on the sampler's thread: plain reads of the slots
            return [Accounted(s.index, s.proc.pid if s.proc is not None and s.proc.returncode is None else None,
                              s.group.max_rss_mb, int(s.seq_sum)) for s in slots]

        def prefixes() -> list[str]:
            return [p for rt in list(self.runtimes.values()) for p in rt.prefixes()]

        def over_cap(slot: int, pid: int, rss_mb: float, cap_mb: float) -> None:
            loop.call_soon_threadsafe(c.barrier, "memory cap", self._over_cap, slots[slot], pid, rss_mb, cap_mb)

        def sampled(sample: dict) -> None:
            loop.call_soon_threadsafe(c.barrier, "accounting", self._sampled, sample)

        self.accounting = Accounting(games, prefixes, every, over_cap, sampled, lambda: thread_roles(loop_tid),
                                     ray=c.recipe.cluster is not None)
        self.accounting.start()

    def stop_accounting(self) -> None:
        if self.accounting is not None:
            self.accounting.stop()

    def sample(self) -> dict | None:
        """The accounting's latest sample (None: off, or not two samples yet)."""
        return self.accounting.latest() if self.accounting is not None else None

    def _over_cap(self, s, pid: int, rss_mb: float, cap_mb: float) -> None:
        if s.proc is not None and s.proc.pid == pid and s.proc.returncode is None:  # not a later start's
            self.keeper.kill(s, "memory", dict(rss_mb=round(rss_mb, 1), max_rss_mb=cap_mb))

    def _sampled(self, sample: dict) -> None:
        """On the loop: an `accounting` event every accounting_event_s; a prefix's sync once."""
        c = self.ctx
        for p in sample["prefixes"]:
            key = (p["prefix"], p["wineserver_pid"])
            if key not in self._syncs_said:
                self._syncs_said.add(key)
                c.events.info("wine_sync", **p)
        every = c.recipe.supervisor.accounting_event_s
        now = time.monotonic()
        if every and now - self._event_at >= every:
            self._event_at = now
            c.events.info("accounting", kinds=sample["kinds"], threads=sample["threads"],
                          games={str(k): v for k, v in sample["games"].items()}, sample_ms=sample["sample_ms"])

    def games_summary(self) -> str:
        """'N games up, N restarting, N failed | N restarts' (and the game hosts', with a cluster)."""
        here = self.keeper.summary()
        return here if self.cluster is None else f"{here} | {self.cluster.summary()}"

    # ---- the status server -----------------------------------------------------------

    def status_source(self):
        """The run's live state for the status server (observe/run_view.py)."""
        from w3async.observe.run_view import SupervisorSource  # noqa: PLC0415 (aiohttp only where a run serves)

        return SupervisorSource(self.ctx.run_dir, self._stats, self.slots, self.cluster, self.sample)

    async def start_status(self) -> None:
        """Serve the run's status (recipe's [status]); RunError when the port is taken."""
        from w3async.observe.status import StatusError, StatusServer  # noqa: PLC0415 (aiohttp only where a run serves)

        c = self.ctx
        st = c.recipe.status
        self.status_server = StatusServer(self.status_source(), host=st.host, port=st.port, events=c.events)
        try:
            port = await self.status_server.start()
        except StatusError as e:
            self.status_server = None
            raise RunError(str(e)) from None
        c.events.info("status_server", url=self.status_server.url, port=port)
        if c.recipe.supervisor.progress_s:
            console(f"w3async: {c.recipe.name} status on {self.status_server.url}")

    async def stop_status(self) -> None:
        """The shutdown's first step (safe when none serves)."""
        if self.status_server is not None:
            await self.status_server.stop()

    async def log_rounds(self) -> None:
        """Once a second: the answerer's round statistics into inference.jsonl."""
        while not self.ctx.life.stop_requested:
            await asyncio.sleep(1.0)
            self.answerer.flush_round_stats()

    async def progress(self) -> None:
        """Every progress_s: one console line (the status view's summary when it serves)."""
        c, n = self.ctx, self.counters
        every = c.recipe.supervisor.progress_s
        if not every:
            return
        last_t, last_steps = time.monotonic(), 0
        while not c.life.stop_requested:
            await asyncio.sleep(every)
            now = time.monotonic()
            rate = (n.agent_steps - last_steps) / max(now - last_t, 1e-9)
            last_t, last_steps = now, n.agent_steps
            if self.status_server is not None:
                from w3async.observe.progress import progress_line  # noqa: PLC0415

                self.status_server.view.refresh()
                console(progress_line(self.status_server.view.status()))
                continue
            line = (f"w3async {c.recipe.name} | {now - self._started:7.1f} s | {n.agent_steps:,} steps | "
                    f"{rate:,.0f} steps/s | {self.games_summary()}")
            more = self.answerer.progress()
            console(line + (f" | {more}" if more else ""))
