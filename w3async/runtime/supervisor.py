"""The supervisor: one asyncio (uvloop) loop that runs the games and answers them.

It owns the run folder, the table and the answerer; it spawns every game slot of the
recipe (keeper.py: spawn, exit, kill, restart with backoff inside a per-slot budget,
the hang watch; slots.py: the restart policy), reads the games' obs doorbells with the
loop's readers and answers every waiting row in rounds (gather.py: check, gather,
answer, ring). On SIGINT/SIGTERM, a stop condition or a fatal fault, close() runs the
shutdown's ordered steps (shutdown.py); watching.py serves the status and prints the
progress line.

The fault barrier: every callback and task the loop runs for us goes through
`barrier`, and the loop's exception handler catches the rest. A fault is recorded
(`fault` in events.jsonl, with its traceback) and either handled (the slot it
concerns is restarted) or ends the run cleanly: shutdown, final checkpoint, shutdown
record, nothing left. A second signal during the shutdown hurries it, never cuts it.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import resource
import signal
import time
import traceback
from pathlib import Path
from typing import Callable

from w3async import files, games
from w3async.provenance import provenance
from w3async.observe.logs import JsonLog, console
from w3async.recipes import Recipe, recipe_to_dict
from w3async.run_folder import RunFolder
from w3async.runtime import procs
from w3async.runtime.answerer import Answerer, Counters, RunControl, RunFailure
from w3async.runtime.keeper import GameKeeper
from w3async.runtime.life import RunContext, RunLife
from w3async.runtime.runfolder import RunError, RunLock, cleanup_previous_run
from w3async.runtime.runtimes import slot_runtimes
from w3async.runtime.limits import Limits
from w3async.runtime.sandbox import Sandbox
from w3async.runtime import shutdown
from w3async.runtime.shutdown import Remains
from w3async.runtime.slots import ASKED, Slot
from w3async.runtime.stackdump import StackDump
from w3async.runtime.teardown import Teardown
from w3async.runtime.watching import RunWatch
from w3async.runtime.wine import WineError
from w3async.sync.gather import make_gatherer
from w3async.sync.table import Table, segment_name


class Supervisor:
    """Runs one recipe in one run folder.

    Lifecycle, as aiohttp's runner has it: `await setup()` owns the run folder, makes the
    table and the answerer (a checkpoint is loaded there, or the run refused) and installs
    the signal handlers; `await run()` sets up if that was not done, starts the games and
    returns when the run ends, after `close()`; `await close()` is the shutdown (idempotent).
    `answerer`: what makes the run's answerer from its RunControl, at set-up (after the
    slots, before any game starts). Made by w3async.compose.supervisor(), the one place
    that chooses it for every entry point (the CLI, eval, the env, a game host).
    `signals` False: no SIGINT/SIGTERM handlers (a game host, on a Ray actor's thread).
    `keep_signals` True (the CLI, which owns the process): after the shutdown the handlers stay,
    ignoring the signals; removed, the default ones came back, and a signal in the event loop
    runner's own teardown exited 1 with two tracebacks.
    `cluster`, for a recipe with [cluster]: the class that links the run to its game hosts
    (w3async.cluster.link.ClusterLink, above this package). Its parts get the run's
    RunContext and the pieces each names (runtime/life.py), never the Supervisor."""

    def __init__(self, recipe: Recipe, run_dir: Path, answerer: Callable[[RunControl], Answerer], *,
                 signals: bool = True, cluster: Callable | None = None, keep_signals: bool = False):
        self.recipe = recipe
        self.run_dir = Path(run_dir)
        self.spec = games.get(recipe.game).spec
        self._make_answerer = answerer
        self.slots: list[Slot] = []
        self.table: Table | None = None
        self.gatherer = None
        self.events: JsonLog | None = None
        self.lock: RunLock | None = None
        self.runtimes: dict[str, object] = {}
        self.answerer: Answerer | None = None  # a fixed policy, or what the composition root made (compose.py)
        self.control: RunControl | None = None  # the answerer's handle on the run
        self.counters = Counters()
        self.life = RunLife()  # asked to stop, shutting down, hurried; the run's cause
        self.ctx: RunContext | None = None  # what the parts share, made at set-up (runtime/life.py)
        self.remains = Remains(self.runtimes)  # Wine, strays and the leftover check at the shutdown
        self.sandbox: Sandbox | None = None  # around every game start (runtime/sandbox.py); None: off
        self.teardown = Teardown()  # the closes, registered as each part is set up (shutdown.py)
        self._set_up = self._closed = False
        self._signals = signals
        self._keep_signals = keep_signals
        self._signals_installed = False
        self.stack_dump: StackDump | None = None  # SIGUSR1's dump (runtime/stackdump.py)
        self._shutdown_done = False  # close() has finished the shutdown: a signal now changes nothing
        self._old_handler = None
        self._cluster_link = cluster
        self.cluster = None  # cluster/link.py's ClusterLink: the groups on game hosts ([cluster])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._round_scheduled = False
        self.obs_readers: set[int] = set()  # the obs doorbells' fds the loop reads
        self.keeper: GameKeeper | None = None  # spawns, hears, kills, restarts, watches the games
        self.watch: RunWatch | None = None  # the status server, inference.jsonl's lines, the progress line
        self.born = procs.started(os.getpid())  # every process of the run starts after this
        self.started_wall = 0.0  # time.time() at set-up (the run lock records it)
        self.started_monotonic = 0.0  # time.monotonic() at set-up (stats' seconds)
        self.faults = 0
        self.setup_failed = False  # the run ended before any game started, on an error
        self._last_round = 0.0
        self._cpu0 = 0.0

    # ---- set-up -------------------------------------------------------------------

    def _setup(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.lock = RunLock(self.run_dir)
        self.teardown.push_raw(self.lock.release)  # each part registers its close as it is set up
        self.events = JsonLog(RunFolder(self.run_dir).events)
        ctx = self.ctx = RunContext(self.recipe, self.run_dir, self.events, self._loop, self.life, self.barrier, self.task)
        shutdown.register_record(self.teardown, self.events, self.life, self._record_figures, self.remains)
        self.stack_dump = StackDump.install(self.run_dir, self._loop) if self._signals else None  # SIGUSR1
        if self.lock.previous.get("pid"):
            # We hold the lock, so the supervisor that wrote it is dead (killed, or the
            # machine went down): end what it left before anything else.
            self.events.warning("previous_run", **cleanup_previous_run(self.lock.previous))
        r = self.recipe
        groups = [g for g in r.games if not g.host for _ in range(g.count)]  # one per game slot here
        sizes = [g.lanes * g.sides for g in groups]  # its rows
        row0s = list(itertools.accumulate(sizes, initial=0))
        n_rows, n_games = row0s[-1], len(groups)
        # Name the table in the lock before any segment exists: a supervisor killed while
        # making them leaves nothing the next run cannot find.
        name = segment_name(self.run_dir.name[:24].replace("/", "_"))
        self.lock.write(pid=os.getpid(), started=self.started_wall, shm=name, pgids=[], born=self.born)
        # (A run whose games all run on game hosts keeps one row here, of no game.)
        self.table = Table(name, max(n_rows, 1), games=list(zip(row0s, sizes)), run_id=os.getpid(),
                           lay=self.spec.layout)
        shutdown.register_table(self.teardown, self.table, self.runtimes, self.obs_readers, self._loop, self.remains)
        if r.cluster is not None:  # rows after the table's: the game hosts' (cluster/link.py)
            if self._cluster_link is None:
                raise RunError("the recipe has a [cluster] section, and this supervisor no cluster link "
                               "(`w3async run` gives it w3async.cluster.link.ClusterLink)")
            self.cluster = self._cluster_link(ctx, row0=self.table.n_rows, slot0=n_games)
        self.gatherer = make_gatherer(self.table, n_games, self.spec.n_types, r.supervisor.gather)
        rts = slot_runtimes(r, groups, self.run_dir, self.runtimes)
        for i, (g, rt, row0, nrows) in enumerate(zip(groups, rts, row0s, sizes)):
            self.slots.append(Slot(i, g, rt, r.binary_path(g), row0, nrows, RunFolder(self.run_dir).game_log(i)))
        self.sandbox = Sandbox.for_run(r.supervisor.sandbox, self.run_dir, self.events if groups else None,
                                       r.supervisor.game_tmpfs_mb)
        limits = Limits(name.lstrip("/"), r.supervisor.game_oom_score_adj) if groups else None
        if limits is not None:
            self.teardown.push("the games' cgroups", limits.close)  # after the games have ended
            if limits.swept:
                self.events.info("cgroups_swept", names=limits.swept)
            if limits.why_off:
                self.events.warning("limits_off", reason=limits.why_off,
                                    kept="the OOM score, the sampled max_rss_mb, the sandbox's sized tmpfs")
        # The answerer is made inside, from the control it answers through (the composition
        # root's maker, w3async/compose.py: the learner loads its checkpoint here, or refuses;
        # a fixed policy with its episode book; an entry point's own).
        self.control = RunControl(ctx, self.spec, self.counters, self.slots, self.table, self.gatherer, self.cluster,
                                  self.schedule_round, self._make_answerer)
        self.answerer = self.control.answerer
        self.teardown.push("rounds on the answerer's thread", self.control.thread_rounds.close)  # before the table's close
        self.keeper = GameKeeper(ctx, table=self.table, gatherer=self.gatherer, slots=self.slots, runtimes=self.runtimes,
                                 control=self.control, sandbox=self.sandbox, limits=limits, lock=self.lock,
                                 born=self.born,
                                 schedule_round=self.schedule_round)
        self.remains.games_kept_by(self.keeper)
        self.watch = RunWatch(ctx, slots=self.slots, runtimes=self.runtimes, counters=self.counters, keeper=self.keeper,
                              answerer=self.answerer, cluster=self.cluster, stats=self.stats,
                              started=self.started_monotonic)
        shutdown.register_answerer(self.teardown, ctx, self.answerer, self.keeper, self.table, self.watch, self.cluster)
        # Only now, the checkpoint loaded: a resume refused above (weights of another network,
        # a missing snapshot) left the run's recipe.json replaced by the recipe it refused.
        made_by = provenance()  # {version, commit, dirty}: the package's version and git commit
        saved = dict(recipe_to_dict(r), w3async=made_by)
        files.atomic_write_text(RunFolder(self.run_dir).recipe, json.dumps(saved, indent=1))
        self.events.info("run_start", run=self.run_dir.name, recipe=r.name, pid=os.getpid(), shm=self.table.name,
                         resumed_steps=self.counters.resumed_steps,
                         rows=n_rows, games=n_games, gather=r.supervisor.gather, policy=r.supervisor.policy,
                         row_bytes=self.table.row_size, row_shape=list(self.table.layout.shape), **made_by)

    # ---- rounds -------------------------------------------------------------------

    def _on_obs(self, obs) -> None:
        obs.drain()
        self.schedule_round()

    # ---- the fault barrier --------------------------------------------------------

    def barrier(self, where: str, fn: Callable, *args) -> None:
        """Run a loop callback; a fault in it is recorded and handled (the slot it
        concerns restarted) or ends the run cleanly, never left to asyncio's log."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 (the barrier: every fault is recorded and handled)
            if self.answerer is not None and self.answerer.failure is not None:
                self.life.fail(self.answerer.failure)  # the answerer failed with its cause, already said
                return
            slot = next((a for a in args if isinstance(a, Slot)), None)
            self._fault(where, e, slot)

    def _fault(self, where: str, e: BaseException, slot: Slot | None = None) -> None:
        self.faults += 1
        detail = f"{type(e).__name__}: {e}"
        tb = "".join(traceback.format_exception(e, limit=8))
        if self.events is not None:
            self.events.error("fault", where=where, slot=slot.index if slot else None, error=detail, traceback=tb)
        if slot is not None and not self.life.stopping:
            try:  # handled: the slot's game is ended and restarted from scratch
                self.keeper.restart_after_fault(slot)
                return
            except Exception as e2:  # noqa: BLE001
                detail += f"; restarting slot {slot.index} failed too: {type(e2).__name__}: {e2}"
        console(f"w3async: internal fault in {where}: {detail}; ending the run")
        self.life.fail(f"internal fault in {where}: {detail}")

    def _loop_exception(self, loop, context: dict) -> None:
        """What escaped every barrier (a callback of a library, a task's error)."""
        e = context.get("exception")
        if isinstance(e, (ConnectionError, asyncio.CancelledError)):
            return  # a client that went away: nothing of the run is broken
        if e is None:
            if self.events is not None:
                self.events.warning("loop_warning", message=str(context.get("message")))
            return
        self._fault(f"loop: {context.get('message')}", e)

    def task(self, coro, where: str) -> asyncio.Task:
        """A task whose error goes through the barrier the moment it happens."""
        t = asyncio.create_task(coro)

        def done(t: asyncio.Task) -> None:
            if not t.cancelled() and t.exception() is not None:
                self._fault(where, t.exception())

        t.add_done_callback(done)
        return t

    def _round(self) -> None:
        self._round_scheduled = False
        period = self.recipe.supervisor.round_period_ms / 1000.0
        now = time.monotonic()
        if period and now - self._last_round < period:
            self._round_scheduled = True
            self._loop.call_later(period - (now - self._last_round), self.barrier, "round", self._round)
            return
        self._last_round = now
        with self.control.lock:  # an answerer on another thread answers under it (RunControl)
            b = self.gatherer.gather()
            if b.bad:
                self.counters.bad_rows += len(b.bad)
                self.keeper.bad_rows(b.bad)
            if b.n:
                self.answerer.submit(b)  # answered through RunControl.answer, now or when its round is back

    def schedule_round(self) -> None:
        """Run a round soon (rows were released, or a doorbell rang)."""
        if not self._round_scheduled and not self.life.stopping:
            self._round_scheduled = True
            self._loop.call_soon(self.barrier, "round", self._round)

    # ---- watching -----------------------------------------------------------------

    def stats(self) -> dict:
        """Counters for benchmarks and the status endpoint."""
        cpu = _cpu_s() - self._cpu0
        return dict(
            agent_steps=self.agent_steps, rounds=self.rounds,
            rows_per_round=(self.agent_steps - self.counters.resumed_steps) / max(self.rounds, 1),
            resumed_steps=self.counters.resumed_steps, seconds=time.monotonic() - self.started_monotonic,
            cpu_s=cpu, bad_rows=self.bad_rows,
            restarts=dict(sum((s.causes for s in self.slots), collections.Counter())),
            games={s.index: dict(pid=s.pid, state=s.state, restarts=s.restarts, recycles=s.recycles, causes=dict(s.causes))
                   for s in self.slots},
            **({"hosts": self.cluster.hosts()} if self.cluster is not None else {}),
            accounting=self.watch.sample() if self.watch is not None else None,
        )

    def _record_figures(self) -> dict:
        """The shutdown record's figures (shutdown.py)."""
        st = self.stats()
        return dict(agent_steps=self.agent_steps, rounds=self.rounds, seconds=round(st["seconds"], 3),
                    cpu_s=round(st["cpu_s"], 3), faults=self.faults,
                    answerer_failure=self.answerer.failure if self.answerer is not None else None)

    # ---- lifecycle ----------------------------------------------------------------

    def summary_games(self) -> str:
        """'N games up, N restarting, N failed | N restarts' for the console (and the
        game hosts', with a cluster)."""
        return self.watch.games_summary() if self.watch is not None else "no game started"

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def agent_steps(self) -> int:
        return self.counters.agent_steps

    @property
    def rounds(self) -> int:
        return self.counters.rounds

    @property
    def bad_rows(self) -> int:
        return self.counters.bad_rows

    @property
    def stop_requested(self) -> bool:
        """A stop condition, a signal or a fault asked the run to end (the shutdown follows)."""
        return self.life.stop_requested

    @property
    def stopping(self) -> bool:
        """The shutdown has begun: no new rounds, answers no longer written."""
        return self.life.stopping

    @property
    def error(self) -> str | None:
        """The run's cause (None: it ended normally, or goes on)."""
        return self.life.error

    @property
    def leftovers(self) -> dict:
        """What the leftover check found at the shutdown (shutdown.py's Remains)."""
        return self.remains.leftovers

    def request_stop(self) -> None:
        """Stop the run (SIGINT, SIGTERM, a stop condition)."""
        self.life.fail(None)

    def fail(self, reason: str) -> None:
        """End the run with this cause (a clean shutdown follows)."""
        self.life.fail(reason)

    # The caller's own resets (an env's reset()): on the loop, or before the games start.
    def seed_games(self, seed_of: Callable[[Slot], int]) -> None:
        """W3S_SEED of every slot's next start only (later starts get new ones)."""
        for s in self.slots:
            s.seed = seed_of(s)

    def games_gone(self) -> list[slice]:
        """The rows of every slot whose game has ended (restarting or failed): their next
        start's rows are fresh whatever restart_games does."""
        return [s.rows for s in self.slots if s.proc is None or s.proc.returncode is not None]

    def restart_games(self, cause: str = ASKED) -> None:
        """End every game at once and start it again: as the run's caller asked (ASKED, an
        env's reset: counted in neither the budget nor the backoff, runtime/slots.py), or
        for a cause of the caller's (a game host that lost its centre)."""
        for s in self.slots:
            self.keeper.kill(s, cause, {})

    async def setup(self) -> None:
        """Own the run folder, make the table, the slots and the answerer (a checkpoint is
        loaded, or the run refused, here), install the signal handlers and the loop's
        fault barrier. Raises RunError (set-up failed: nothing of the run is left running)."""
        if self._set_up:
            return
        self._set_up = True
        self._loop = asyncio.get_running_loop()
        self.started_monotonic, self.started_wall, self._cpu0 = time.monotonic(), time.time(), _cpu_s()
        self.install_signals()
        self._old_handler = self._loop.get_exception_handler()
        self._loop.set_exception_handler(self._loop_exception)
        try:
            self._setup()
        except (WineError, RunError, RunFailure) as e:  # a cause, said as it is
            self.setup_failed = True
            self.life.fail(str(e))
        except Exception as e:  # noqa: BLE001 (the barrier around set-up)
            self.setup_failed = True
            self._fault("set-up", e)
        if self.error:
            await self.close()
            raise RunError(self.error)

    def install_signals(self) -> None:
        """SIGINT/SIGTERM start the shutdown, until it is complete (a second one hurries
        it). Installed again after Ray's start, which sets handlers of its own."""
        if self._signals:
            for sig in _SIGNALS:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
            self._signals_installed = True

    async def run(self) -> dict:
        """Run until a stop condition, a signal or a fatal error; then close(). Returns
        stats(); raises RunError when the run failed."""
        await self.setup()
        tasks: list[asyncio.Task] = []
        try:
            await self._start(tasks)
            timeout = self.recipe.stop_after_s or None
            try:
                await asyncio.wait_for(self.life.stop.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        except (WineError, RunError, RunFailure) as e:  # a cause, said as it is
            self.life.fail(str(e))
        except Exception as e:  # noqa: BLE001 (the barrier around the start and the wait)
            # Before any game started, a failure is the set-up's: bad input (exit 2).
            self.setup_failed = not any(s.proc is not None for s in self.slots)
            self._fault("set-up" if self.setup_failed else "run", e)
        finally:
            for t in tasks:
                t.cancel()
            await self.close()
        st = self.stats()
        if self.error:
            raise RunError(self.error)
        return st

    async def close(self) -> None:
        """The shutdown (idempotent): games asked, then ended; the answerer stopped (its
        last checkpoint); Wine ended; shared memory unlinked; the leftover check and the
        shutdown record; then the signal handlers removed (kept, ignoring, with
        keep_signals)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.lock is not None:  # set-up got as far as owning the run folder
                self.life.stopping = True
                self.life.stop.set()
                await self.teardown.aclose()  # shutdown.py's steps, in reverse of their set-up
        finally:
            self._shutdown_done = True
            if self._signals_installed and not self._keep_signals:
                for sig in _SIGNALS:
                    self._loop.remove_signal_handler(sig)
                self._loop.set_exception_handler(self._old_handler)
                self._signals_installed = False
            if self.stack_dump is not None:  # SIGUSR1 then ignored with keep_signals (its default kills)
                self.stack_dump.close(ignore=self._keep_signals)

    async def _start(self, tasks: list) -> None:
        if self.recipe.status.enabled:
            await self.watch.start_status()
        self.watch.start_accounting()
        await self._loop.run_in_executor(None, self.answerer.start, self._loop)
        if self.cluster is not None:  # Ray, the game hosts (their games start there)
            await self.cluster.start(tasks, self.control, self.answerer)
            self.install_signals()
        tasks.append(self.task(self.watch.log_rounds(), "round statistics"))
        for s in self.slots:
            if self.life.stop_requested:
                return  # a signal or a fault during the spawns: stop starting games
            await self._loop.run_in_executor(None, s.runtime.prepare)  # a Wine prefix's first boot: ~20 s
            self.barrier("spawn", self.keeper.spawn, s)
            if s.runtime.obs is not None and s.runtime.obs.fd not in self.obs_readers:
                self.obs_readers.add(s.runtime.obs.fd)
                if not self.control.thread_rounds.add_obs(s.runtime.obs):  # an answerer that gathers waits on it itself
                    self._loop.add_reader(s.runtime.obs.fd, self.barrier, "obs doorbell", self._on_obs, s.runtime.obs)
            await asyncio.sleep(0)  # let a signal in between two spawns
        tasks += [self.task(self.keeper.watch(), "hang watch"), self.task(self.watch.progress(), "progress")]

    def _on_signal(self, sig: int) -> None:
        if self._shutdown_done:  # the shutdown record is written: nothing left to stop or hurry
            return
        if not self.life.stopping:
            self.request_stop()
            return
        if not self.life.hurrying:  # said once: a signal every ms made a line every ms
            console(f"w3async: {signal.Signals(sig).name} during the shutdown: hurrying it, the clean-up still runs")
        self.life.hurrying = True

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime
