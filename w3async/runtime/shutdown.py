"""The run's shutdown, in its ordered steps (STYLE.md, 6): ask the games to stop, wait
with a deadline, terminate, kill by process group; stop the answerer (its last
checkpoint); end Wine and any stray that carries the run's segment; check what is left;
unlink the shared memory; write the shutdown record; release the run lock.

The steps sit on the run's Teardown (teardown.py, an AsyncExitStack): the supervisor calls
each register_* below the moment the part it closes is set up, so the stack unwinds them
in the order above (the reverse of the registrations: lock, record, table, remains,
answerer, live). Each step runs whatever the one before it raised: the errors are kept,
said on the console, made the run's cause when it has none, and the shutdown record is
written last in every case. Each register_* is given the parts its steps close, never
the Supervisor.
"""

from __future__ import annotations

import asyncio
import signal
import time

from typing import Callable

from w3async.observe.logs import JsonLog, console
from w3async.runtime import procs
from w3async.runtime.answerer import Answerer, RunFailure
from w3async.runtime.keeper import GameKeeper
from w3async.runtime.life import RunContext, RunLife
from w3async.runtime.slots import Slot, SlotState
from w3async.runtime.teardown import Teardown
from w3async.runtime.watching import RunWatch
from w3async.sync.table import Table


class Remains:
    """What a run leaves behind it: Wine's processes, the strays, the leftover check; its
    `leftovers` go into the shutdown record. Made before any part of the run (a set-up
    that fails early still ends Wine); games_kept_by() once the games' keeper is made."""

    def __init__(self, runtimes: dict):
        self.runtimes = runtimes
        self.keeper: GameKeeper | None = None  # None: no game was started
        self.leftovers: dict = {}

    def games_kept_by(self, keeper: GameKeeper) -> None:
        """From now on games may run: the shutdown ends keeper's strays and runs its
        leftover check (which knows the games' process groups) instead of Wine's alone."""
        self.keeper = keeper

    async def end(self, td: Teardown) -> None:
        killed_wine = []
        for rt in self.runtimes.values():
            killed_wine += await td.step(f"{rt.name} clean-up", rt.cleanup, off_loop=True) or []
        if self.keeper is None:  # no game was started: only Wine's own processes can be left
            strays, check = [], self._wine_leftovers
        else:
            strays, check = await td.step("strays", self.keeper.end_run_strays) or [], self.keeper.leftovers
        leftovers = await td.step("leftover check", check) or dict(processes=None, wine=None)
        leftovers.update(wine_sigkilled=killed_wine, strays_killed=strays)
        self.leftovers = leftovers

    def _wine_leftovers(self) -> dict:
        return dict(processes=[], wine=[p for rt in self.runtimes.values() for p in rt.leftovers()])

    async def end_unless_done(self, td: Teardown) -> None:
        if not self.leftovers:  # the table's close did not run them
            await self.end(td)


def register_record(td: Teardown, events: JsonLog, life: RunLife, summary: Callable[[], dict],
                    remains: Remains) -> None:
    """The events log is open: the shutdown record is written (and the log closed) after
    every later close (the run lock, registered before, is released after it). Just
    before it, for a run whose set-up stopped before its table (a game host's incarnation
    stopped while it started): Wine, the strays and the leftover check all the same, so
    every record says what was left. `summary()`: the record's figures (agent_steps,
    rounds, seconds, cpu_s, faults, answerer_failure)."""
    td.push_raw(_record, td, events, life, summary, remains)
    td.push("remains", remains.end_unless_done, td)


def register_table(td: Teardown, table: Table, runtimes: dict, obs_readers: set[int], loop,
                   remains: Remains) -> None:
    """The table exists: unlinked, then closed, once the games' remains are ended; before
    that, Wine, the strays and the leftover check (their closes need no more than the run's
    marker and runtimes, which are iterated at the close)."""
    td.push("shared memory", table.close)
    td.push("shared memory", table.unlink)
    td.push("runtimes close", _close_runtimes, runtimes, td)
    td.push("obs readers", _remove_readers, obs_readers, loop, td)
    td.push("remains", remains.end, td)


def register_answerer(td: Teardown, ctx: RunContext, answerer: Answerer, keeper: GameKeeper, table: Table,
                      watch: RunWatch, cluster) -> None:
    """The answerer is made: stopped (its last checkpoint) once the games are gone; before
    that, the games stopped, the game hosts, the accounting and the status server (their
    closes are no-ops for what never started)."""
    td.push("final checkpoint", _stop_answerer, ctx, answerer)
    td.push("game logs", keeper.cap_logs)  # the games are gone: what they wrote last is cut too
    td.push("games", _stop_games, ctx, keeper, table, td)
    if cluster is not None:  # the game hosts end their games, then Ray is left
        td.push("game hosts", cluster.stop)
    td.push("accounting", watch.stop_accounting, off_loop=True)
    td.push("status server", watch.stop_status)


async def _stop_games(ctx: RunContext, keeper: GameKeeper, table: Table, td: Teardown) -> None:
    """Ask, wait, terminate, kill by process group; unwire what exited."""
    slots = keeper.slots
    for s in slots:
        if s.restart_handle:
            s.restart_handle.cancel()
    live = [s for s in slots if s.proc is not None and s.proc.returncode is None]
    await td.step("stop request", table.request_stop)
    for s in live:
        if s.bells:
            await td.step("stop ring", s.bells.ring_act)
    await wait_exit(ctx.life, live, ctx.recipe.supervisor.stop_timeout_s)
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)):
        left = [s for s in live if s.proc.poll() is None]
        for s in left:
            procs.killpg(s.proc.pid, sig)
        await wait_exit(ctx.life, left, grace, hurry=sig != signal.SIGKILL)
    for s in slots:
        if s.proc is not None:
            if s.proc.poll() is not None and s.pidfd >= 0:
                await td.step(f"slot {s.index}", keeper.unwire, s)
            if s.state is not SlotState.FAILED:
                s.state = SlotState.STOPPED


async def _stop_answerer(ctx: RunContext, answerer: Answerer) -> None:
    """With a learner: its update finishes, then a last checkpoint (resumable). A write
    that fails is the run's cause (the previous checkpoint is intact)."""
    try:
        await ctx.loop.run_in_executor(None, answerer.stop)
    except RunFailure as e:
        ctx.life.fail(answerer.failure or str(e))


async def _remove_readers(obs_readers: set[int], loop, td: Teardown) -> None:
    for fd in obs_readers:
        await td.step("obs reader", loop.remove_reader, fd)


async def _close_runtimes(runtimes: dict, td: Teardown) -> None:
    for rt in runtimes.values():
        await td.step(f"{rt.name} close", rt.close)


def _record(td: Teardown, events: JsonLog, life: RunLife, summary: Callable[[], dict], remains: Remains) -> None:
    errors = td.errors
    if errors:
        console("w3async: shutdown: " + "; ".join(errors))
        life.fail("shutdown: " + "; ".join(errors))  # unless the run already has its cause
    events.info("shutdown", error=life.error, **summary(), shutdown_errors=errors, leftovers=remains.leftovers)
    events.close()


async def wait_exit(life: RunLife, slots: list[Slot], timeout: float, hurry: bool = True) -> None:
    """Until every game of `slots` exited, the deadline passed, or (hurry) a second signal
    came: a hurried shutdown still runs every step, with shorter waits."""
    deadline = time.monotonic() + timeout
    while any(s.proc.poll() is None for s in slots) and time.monotonic() < deadline and not (hurry and life.hurrying):
        await asyncio.sleep(0.02)
