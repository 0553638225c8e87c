"""The run's shutdown, in its ordered steps (STYLE.md, 6): ask the games to stop, wait
with a deadline, terminate, kill by process group; stop the answerer (its last
checkpoint); end Wine and any stray that carries the run's segment; check what is left;
unlink the shared memory; write the shutdown record; release the run lock.

Each step runs whatever the one before it raised: the errors are collected, said on the
console, made the run's cause when it has none, and the shutdown record is written last
in every case. It works for its host, the Supervisor (which calls it once, from close()),
through the host's public members only (recipe, slots, table, keeper, answerer,
runtimes, watch, obs_readers, loop, hurrying, fail, error, events, stats, lock, cluster).
"""

from __future__ import annotations

import asyncio
import signal
import time

from w3async.observe.logs import console
from w3async.runtime import procs
from w3async.runtime.answerer import RunFailure
from w3async.runtime.slots import Slot, SlotState


async def shut_down(host) -> None:
    """Ask, wait, terminate, kill by process group, end Wine, unlink, check. Each
    step runs whatever the one before it raised; the errors are recorded and the
    shutdown record is written last in every case."""
    errors: list[str] = []
    loop = host.loop

    async def step(what: str, fn, *args, off_loop: bool = False):
        try:
            if off_loop:
                return await loop.run_in_executor(None, fn, *args)
            r = fn(*args)
            return await r if asyncio.iscoroutine(r) else r
        except Exception as e:  # noqa: BLE001 (collected: the clean-up goes on)
            errors.append(f"{what}: {type(e).__name__}: {e}")
            return None

    await step("status server", host.watch.stop_status)
    await step("accounting", host.watch.stop_accounting, off_loop=True)
    if host.cluster is not None:  # the game hosts end their games, then Ray is left
        await step("game hosts", host.cluster.stop)
    sv = host.recipe.supervisor
    for s in host.slots:
        if s.restart_handle:
            s.restart_handle.cancel()
    live = [s for s in host.slots if s.proc is not None and s.proc.returncode is None]
    if host.table is not None:
        await step("stop request", host.table.request_stop)
    for s in live:
        if s.bells:
            await step("stop ring", s.bells.ring_act)
    await wait_exit(host, live, sv.stop_timeout_s)
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 2.0)):
        left = [s for s in live if s.proc.poll() is None]
        for s in left:
            procs.killpg(s.proc.pid, sig)
        await wait_exit(host, left, grace, hurry=sig != signal.SIGKILL)
    for s in host.slots:
        if s.proc is not None:
            if s.proc.poll() is not None and s.pidfd >= 0:
                await step(f"slot {s.index}", host.keeper.unwire, s)
            if s.state is not SlotState.FAILED:
                s.state = SlotState.STOPPED
    await step("game logs", host.keeper.cap_logs)  # the games are gone: what they wrote last is cut too
    if host.answerer is not None:
        # With a learner: its update finishes, then a last checkpoint (resumable). A
        # write that fails is the run's cause (the previous checkpoint is intact).
        try:
            await loop.run_in_executor(None, host.answerer.stop)
        except RunFailure as e:
            host.fail(host.answerer.failure or str(e))
        except Exception as e:  # noqa: BLE001 (collected: the clean-up goes on)
            errors.append(f"final checkpoint: {type(e).__name__}: {e}")
    killed_wine = []
    for rt in host.runtimes.values():
        killed_wine += await step(f"{rt.name} clean-up", rt.cleanup, off_loop=True) or []
    strays = await step("strays", host.keeper.end_run_strays) or []
    leftovers = await step("leftover check", host.keeper.leftovers) or dict(processes=None, wine=None)
    leftovers.update(wine_sigkilled=killed_wine, strays_killed=strays)
    host.leftovers = leftovers
    for fd in host.obs_readers:
        await step("obs reader", loop.remove_reader, fd)
    for rt in host.runtimes.values():
        await step(f"{rt.name} close", rt.close)
    if host.table is not None:
        await step("shared memory", host.table.unlink)
        await step("shared memory", host.table.close)
    if errors:
        console("w3async: shutdown: " + "; ".join(errors))
        host.fail("shutdown: " + "; ".join(errors))  # unless the run already has its cause
    st = host.stats()
    if host.events is not None:
        host.events.info("shutdown", error=host.error, agent_steps=host.agent_steps, rounds=host.rounds,
                         seconds=round(st["seconds"], 3), cpu_s=round(st["cpu_s"], 3), faults=host.faults,
                         answerer_failure=host.answerer.failure if host.answerer is not None else None,
                         shutdown_errors=errors, leftovers=host.leftovers)
        host.events.close()
    host.lock.release()


async def wait_exit(host, slots: list[Slot], timeout: float, hurry: bool = True) -> None:
    """Until every game of `slots` exited, the deadline passed, or (hurry) a second signal
    came: a hurried shutdown still runs every step, with shorter waits."""
    deadline = time.monotonic() + timeout
    while any(s.proc.poll() is None for s in slots) and time.monotonic() < deadline and not (hurry and host.hurrying):
        await asyncio.sleep(0.02)
