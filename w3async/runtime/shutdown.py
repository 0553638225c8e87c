"""The run's shutdown, in its ordered steps (STYLE.md, 6): ask the games to stop, wait
with a deadline, terminate, kill by process group; stop the answerer (its last
checkpoint); end Wine and any stray that carries the run's segment; check what is left;
unlink the shared memory; write the shutdown record; release the run lock.

The steps sit on the run's Teardown (teardown.py, an AsyncExitStack): the supervisor calls
each register_* below the moment the part it closes is set up, so the stack unwinds them
in the order above (the reverse of the registrations: lock, record, table, remains,
answerer, live). Each step runs whatever the one before it raised: the errors are kept,
said on the console, made the run's cause when it has none, and the shutdown record is
written last in every case. The host is the Supervisor, through its public members
(recipe, slots, table, keeper, answerer, runtimes, watch, obs_readers, loop, hurrying,
fail, error, events, stats, lock, cluster).
"""

from __future__ import annotations

import asyncio
import signal
import time

from w3async.observe.logs import console
from w3async.runtime import procs
from w3async.runtime.answerer import RunFailure
from w3async.runtime.slots import Slot, SlotState
from w3async.runtime.teardown import Teardown


def register_record(host, td: Teardown) -> None:
    """The events log is open: the shutdown record is written (and the log closed) after
    every later close (the run lock, registered before, is released after it). Just
    before it, for a run whose set-up stopped before its table (a game host's incarnation
    stopped while it started): Wine, the strays and the leftover check all the same, so
    every record says what was left."""
    td.push_raw(_record, host, td)
    td.push("remains", _remains_unless_done, host, td)


def register_table(host, td: Teardown) -> None:
    """The table exists: unlinked, then closed, once the games' remains are ended; before
    that, Wine, the strays and the leftover check (their closes need no more than the run's
    marker and runtimes, which are iterated at the close)."""
    td.push("shared memory", host.table.close)
    td.push("shared memory", host.table.unlink)
    td.push("runtimes close", _close_runtimes, host, td)
    td.push("obs readers", _remove_readers, host, td)
    td.push("remains", _remains, host, td)


def register_answerer(host, td: Teardown) -> None:
    """The answerer is made: stopped (its last checkpoint) once the games are gone; before
    that, the games stopped, the game hosts, the accounting and the status server (their
    closes are no-ops for what never started)."""
    td.push("final checkpoint", _stop_answerer, host)
    td.push("game logs", host.keeper.cap_logs)  # the games are gone: what they wrote last is cut too
    td.push("games", _stop_games, host, td)
    if host.cluster is not None:  # the game hosts end their games, then Ray is left
        td.push("game hosts", host.cluster.stop)
    td.push("accounting", host.watch.stop_accounting, off_loop=True)
    td.push("status server", host.watch.stop_status)


async def _stop_games(host, td: Teardown) -> None:
    """Ask, wait, terminate, kill by process group; unwire what exited."""
    for s in host.slots:
        if s.restart_handle:
            s.restart_handle.cancel()
    live = [s for s in host.slots if s.proc is not None and s.proc.returncode is None]
    await td.step("stop request", host.table.request_stop)
    for s in live:
        if s.bells:
            await td.step("stop ring", s.bells.ring_act)
    await wait_exit(host, live, host.recipe.supervisor.stop_timeout_s)
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)):
        left = [s for s in live if s.proc.poll() is None]
        for s in left:
            procs.killpg(s.proc.pid, sig)
        await wait_exit(host, left, grace, hurry=sig != signal.SIGKILL)
    for s in host.slots:
        if s.proc is not None:
            if s.proc.poll() is not None and s.pidfd >= 0:
                await td.step(f"slot {s.index}", host.keeper.unwire, s)
            if s.state is not SlotState.FAILED:
                s.state = SlotState.STOPPED


async def _stop_answerer(host) -> None:
    """With a learner: its update finishes, then a last checkpoint (resumable). A write
    that fails is the run's cause (the previous checkpoint is intact)."""
    try:
        await host.loop.run_in_executor(None, host.answerer.stop)
    except RunFailure as e:
        host.fail(host.answerer.failure or str(e))


async def _remains(host, td: Teardown) -> None:
    """Wine's processes, the strays, then the leftover check (the shutdown record's)."""
    killed_wine = []
    for rt in host.runtimes.values():
        killed_wine += await td.step(f"{rt.name} clean-up", rt.cleanup, off_loop=True) or []
    strays = await td.step("strays", host.keeper.end_run_strays) or []
    leftovers = await td.step("leftover check", host.keeper.leftovers) or dict(processes=None, wine=None)
    leftovers.update(wine_sigkilled=killed_wine, strays_killed=strays)
    host.leftovers = leftovers


async def _remains_unless_done(host, td: Teardown) -> None:
    if not host.leftovers:  # the table's close did not run them
        await _remains(host, td)


async def _remove_readers(host, td: Teardown) -> None:
    for fd in host.obs_readers:
        await td.step("obs reader", host.loop.remove_reader, fd)


async def _close_runtimes(host, td: Teardown) -> None:
    for rt in host.runtimes.values():
        await td.step(f"{rt.name} close", rt.close)


def _record(host, td: Teardown) -> None:
    errors = td.errors
    if errors:
        console("w3async: shutdown: " + "; ".join(errors))
        host.fail("shutdown: " + "; ".join(errors))  # unless the run already has its cause
    st = host.stats()
    host.events.info("shutdown", error=host.error, agent_steps=host.agent_steps, rounds=host.rounds,
                     seconds=round(st["seconds"], 3), cpu_s=round(st["cpu_s"], 3), faults=host.faults,
                     answerer_failure=host.answerer.failure if host.answerer is not None else None,
                     shutdown_errors=errors, leftovers=host.leftovers)
    host.events.close()


async def wait_exit(host, slots: list[Slot], timeout: float, hurry: bool = True) -> None:
    """Until every game of `slots` exited, the deadline passed, or (hurry) a second signal
    came: a hurried shutdown still runs every step, with shorter waits."""
    deadline = time.monotonic() + timeout
    while any(s.proc.poll() is None for s in slots) and time.monotonic() < deadline and not (hurry and host.hurrying):
        await asyncio.sleep(0.02)
