"""The answerer that hands rows to a Python caller on another thread, and the thread
that runs the supervisor.

The supervisor runs unchanged (restarts, hang watch, Wine, injection, status server,
logs) on an event loop of its own in `SupervisorThread`. Its answerer is a `Bridge`
(runtime/answerer.py's contract): each gathered row is held (left out of the gathers),
copied into the bridge's own buffers (env/rowcopies.py, in C) and offered to the caller.
A round on the caller's thread is three C calls (the gather that holds, the copy that
posts, the count of rows ready): a step's rounds cost what one did in Python.

The caller's thread runs the step's rounds itself: it answers through RunControl.answer
and, while it waits for rows, yields its core for up to a millisecond, gathering when an
obs doorbell rang, then sleeps on the doorbells and runs the round when they ring
(ThreadRounds.run, runtime/thread_rounds.py), all under the run's lock (RunControl.lock, which the loop holds
wherever the rows' state changes). A lockstep step then wakes no other thread (1.9x the
steps/s of answering and gathering on the loop's thread). The loop goes on with
everything else: starts, restarts, the hang watch, a bad row's game, the status server.
A run with game hosts (a cluster) leaves the rounds and answers to the loop, whose
sockets reach the hosts. That lock guards the per-row state both threads read. A waiting
thread sleeps with it released on a wake-up eventfd of its own (and the obs doorbells
when it runs the rounds): the loop, or another thread, writes it when rows or the run's
end are there. No `threading.Condition`: its wait is Python code, where a
KeyboardInterrupt can land between releasing the lock and taking it back.

A row's life, as the caller sees it (`take` and `give`):
- posted: the game posted an observation, not handed out yet;
- handed: the caller has it and owes an action (`give` answers it);
- cut: its game ended (killed, crashed, hung, restarted) in the middle of an episode;
  the caller is told once, as a truncation, before the new game's first observation.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import threading
import time

import numpy as np

from w3async import eventloop
from w3async.env.rowcopies import row_copies
from w3async.runtime.answerer import QuietAnswerer, Ticket
from w3async.sync.gather import Batch


class EnvClosed(RuntimeError):
    """The run behind the env ended: the message says why (the supervisor's error)."""


class EnvInterrupted(RuntimeError):
    """A step was interrupted half-way through its rows (a KeyboardInterrupt, or another
    signal handler's exception, between an answer's parts or a round's): which of its rows
    were answered or handed out is not known. reset() restarts every game and goes on."""


class _Sleeper:
    """One caller thread's means to sleep in Bridge.wait: its wake-up eventfd and its poll
    object (a poll object is one thread's: two threads polling one fail) with the obs
    doorbells it watches."""

    def __init__(self):
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.poll = select.poll()
        self.poll.register(self.fd, select.POLLIN)
        self.watched: list[int] = []

    def watch(self, fds: list[int]) -> None:
        if fds != self.watched:
            for fd in self.watched:
                self.poll.unregister(fd)
            for fd in fds:
                self.poll.register(fd, select.POLLIN)
            self.watched = fds

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Bridge(QuietAnswerer):
    """An Answerer whose rows are answered by a caller on another thread."""

    gather_here = True  # False: the rounds and answers on the loop, as a cluster's run has them (tests)
    # How long a waiting caller's thread yields its core (sched_yield(), the lock released)
    # before it sleeps on the doorbells, reading them between yields and gathering only
    # when one rang: the games it just answered post within a few hundred microseconds,
    # each yield leaves the core to any game waiting for it, and a thread that sleeps lets
    # its core go idle. On a VM an idle core halts: waking it took 50-80 us (perf sched
    # on this project's 2-core VM), once or twice a step. Against 8 rounds between yields
    # and then a sleep: step() 1.18x over 8 duel games, 1.0-1.18x over 8 null ones;
    # AsyncVectorEnv's steps/s, whose workers run this bridge too, unchanged
    # (docs/performance.md). tests/env/test_env.py checks that a long wait sleeps.
    spin_s = 0.001

    def __init__(self, control, opponent=None):
        self.control = control
        self.opponent = opponent  # env/opponent.py's Opponent: plays its rows before the caller sees any
        n = control.n_rows
        self.n_rows = n
        # `with self.lock`: the lock's own enter and exit are C calls, where a KeyboardInterrupt
        # cannot land between taking and releasing it (it can inside a Condition's Python code).
        self.lock = control.lock
        self.gathers = control.local and self.gather_here  # the caller's thread gathers and answers
        self._local = threading.local()  # each caller thread's _Sleeper
        self._sleepers: list[_Sleeper] = []  # every one made (closed with the bridge)
        self._asleep: set[int] = set()  # the wake-up eventfds of the threads asleep now
        slot_of = np.zeros(n, np.int32)
        for g in control.games:
            slot_of[g.row0:g.row0 + g.nrows] = g.index
        self.copies = c = row_copies(n, slot_of, control.spec.layout)  # the rows' observations, last posts and states
        self.reward, self.flags, self.episode, self.step, self.obs_seq = c.reward, c.flags, c.episode, c.step, c.obs_seq
        self.posted, self.handed, self.cut, self.in_episode = c.posted, c.handed, c.cut, c.in_episode
        self.gen, self.stamp = c.gen, c.stamp  # each row's generation when held, when it became ready
        self.epoch = np.zeros(n, np.int64)  # +1 each time a row's game is reset (reset() waits on it)
        self._clock = itertools.count(1)
        self._versions = np.zeros(n, np.uint32)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ended: str | None = None  # set by SupervisorThread when the run is over
        self.restarts = 0  # rows cut by a game's end mid-episode
        self._enough = None  # the waiting caller's condition: the loop wakes it only when it holds
        self.broken: str | None = None  # why the rows' state is unknown (EnvInterrupted) until a reset

    # ---- the loop's side (the Answerer contract) ------------------------------------------------

    def start(self, loop) -> None:
        self.loop = loop
        if self.opponent is not None:
            self.opponent.start(loop)

    def stop(self) -> None:
        if self.opponent is not None:
            self.opponent.stop()

    def submit(self, b: Batch, held: bool = False) -> None:
        """held: the rows were taken as they were gathered (ThreadRounds.run's)."""
        if self.opponent is not None:
            self.opponent.play(b)  # answers its rows; b keeps the caller's
            if not b.n:
                return
        rows = b.rows[: b.n].astype(np.int64)
        with self.lock:  # one hold from the take to the copies: the caller sees posted rows whole
            if not held:
                self.control.take(rows)  # not gathered again until answered
            # posted, with their generations now (a caller may answer the moment they show)
            self.copies.put(rows, b, self.control.generations, next(self._clock))
            self._wake()

    def rows_reset(self, rows: slice) -> None:
        if self.opponent is not None:
            self.opponent.rows_reset(rows)
        with self.lock:
            self.epoch[rows] += 1
            cut = self.in_episode[rows] | self.handed[rows]
            self.cut[rows] |= cut
            self.restarts += int(cut.sum())
            self.stamp[rows] = np.where(cut, next(self._clock), self.stamp[rows])
            self.posted[rows] = False
            self.handed[rows] = False
            self.in_episode[rows] = False
            self._wake()

    def _wake(self) -> None:
        """Wake the sleeping caller threads if what they wait for may be there. Rounds on
        the loop wake the caller only once its condition holds (each wake-up it cannot
        use costs a thread switch: 4-5 a step with 8 games posting one by one); with rounds
        on the callers' threads, a sleeper is another caller, waiting for rows of its own."""
        if self._asleep and (self.gathers or self._enough is None or self._enough()):
            self.wake_thread()

    def wake_thread(self) -> None:
        """Wake every caller thread asleep in wait() (rows were given, the run ended, a
        doorbell was added). Call with the lock held: no eventfd closes meanwhile."""
        for fd in tuple(self._asleep):
            try:
                os.eventfd_write(fd, 1)
            except (BlockingIOError, OSError):  # a wake-up pending already
                pass

    def close(self) -> None:
        """The caller's side is done (the run ended): the wake-up eventfds closed."""
        with self.lock:
            self._asleep.clear()
            for s in self._sleepers:
                s.close()
            self._sleepers.clear()

    def _answer(self, rows: np.ndarray, seqs: np.ndarray, gens: np.ndarray, actions: np.ndarray) -> None:
        # RunControl drops the rows whose game restarted since they were held (stale).
        with self.lock:  # on the caller's thread (direct) or on the loop (a cluster's)
            self.control.answer(Ticket(rows, gens), seqs, actions, self._versions[: len(rows)])

    # ---- the caller's side ---------------------------------------------------------------------

    def ready(self) -> np.ndarray:
        """Rows that can be handed out now (call with the lock held)."""
        return np.flatnonzero(self.posted | self.cut)

    def wait(self, enough, timeout_s: float | None) -> None:
        """Block until enough() (called with the lock held) or the run ends; EnvClosed then.
        The rounds that bring the rows run here (gathers), or on the loop."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self.lock:
            self._usable()
            always = True  # a wait's first round gathers whatever is posted, rung or not
            spin_end = time.perf_counter() + self.spin_s
            try:
                while True:
                    self._enough = enough  # (another thread's wait may have ended meanwhile)
                    if self.gathers:
                        try:
                            self.control.thread_rounds.run(always)
                        except BaseException as e:
                            self._failed("round", e)
                            raise
                    if enough():
                        return
                    if self.ended is not None:
                        raise EnvClosed(self.ended)
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise TimeoutError(f"no rows ready within {timeout_s} s")
                    # No `continue` in this loop: CPython (3.11-3.13) unwinds a Ctrl-C raised
                    # at a back edge from the instruction before the jump's target, and a
                    # `continue` here jumped to the loop's head, just past the try's start:
                    # neither the finally nor the `with` ran, the lock stayed held and the next
                    # sleep deadlocked (tests/runtime/test_interrupts.py checks every back edge).
                    if self.gathers and time.perf_counter() < spin_end:
                        self._unlocked(os.sched_yield)
                        always = False  # the doorbells read: a gather if one rang
                    else:
                        nap = 0.5 if left is None else min(left, 0.5)  # a lost ring costs at most this
                        woke = self._sleep(nap)
                        always = not woke  # after a nap with no ring: a round all the same
            finally:
                self._enough = None

    def _sleep(self, seconds: float) -> bool:
        """Sleep on this thread's wake-up eventfd and (when this thread runs the rounds) the
        obs doorbells, the lock released (call with the lock held once). Whether something
        woke it before the time was up."""
        s = getattr(self._local, "sleeper", None)
        if s is None or s.fd < 0:
            s = self._local.sleeper = _Sleeper()
            self._sleepers.append(s)
        s.watch([o.fd for o in self.control.thread_rounds.obs_bells] if self.gathers else [])
        self._asleep.add(s.fd)
        try:
            woke = self._unlocked(s.poll.poll, seconds * 1000.0)
        finally:
            self._asleep.discard(s.fd)
        if any(fd == s.fd for fd, _ in woke):
            try:
                os.eventfd_read(s.fd)
            except (BlockingIOError, OSError):
                pass
        return bool(woke)

    def _unlocked(self, fn, *args):
        """fn(*args) with the run's lock released (call with it held once), the lock taken
        back whatever happens, an interrupt (KeyboardInterrupt) at any call included."""
        lock, held = self.control.lock, (1, threading.get_ident())  # the RLock's state, held once
        try:
            lock.release()
            return fn(*args)
        finally:
            # Not acquire(): a signal handler's exception (Ctrl-C) cuts its wait for a lock
            # the other thread holds, leaving it untaken. The RLock's _acquire_restore (what
            # Condition.wait takes it back with) waits through signals; they raise after.
            lock._acquire_restore(held)

    def take(self, rows: np.ndarray) -> tuple[dict, dict]:
        """Hand out these rows (each posted or cut; call with the lock held): their
        observations (a cut row: the last one handed out) and the step's arrays, all new
        arrays (env/rowcopies.py)."""
        return self.copies.take(rows)

    def give(self, rows: np.ndarray, actions: np.ndarray) -> None:
        """Answer the handed-out rows among these (others: a cut row's, or a row not
        handed out, the action is dropped)."""
        rows = np.asarray(rows, np.int64)
        actions = np.asarray(actions)
        with self.lock:
            self._usable()
            owed = self.handed[rows]
            if np.count_nonzero(owed) == len(owed):  # a step's usual case: no selection to copy
                r, acts = rows, actions.astype(np.int32)  # a new array: the caller may reuse its own
            else:
                r = rows[owed]
                acts = actions[owed].astype(np.int32, copy=False)  # a new array (fancy indexing)
            if not len(r) or self.loop is None:
                return
            try:
                self.handed[r] = False
                seqs, gens = self.obs_seq[r], self.gen[r]  # new arrays (fancy indexing)
                if self.gathers:
                    self._answer(r, seqs, gens, acts)  # under the run's lock: see the module's note
                else:
                    self.loop.call_soon_threadsafe(self._answer, r, seqs, gens, acts)
            except BaseException as e:
                self._failed("answer", e)
                raise

    def _usable(self) -> None:
        """EnvClosed when the run has ended, EnvInterrupted until a reset after a step
        interrupted half-way (call with the lock held)."""
        if self.ended is not None:
            raise EnvClosed(self.ended)
        if self.broken is not None:
            raise EnvInterrupted(self.broken)

    def _failed(self, what: str, e: BaseException) -> None:
        """An answer or a round on the caller's thread did not finish. An error is a fault,
        as on the loop: the run ends with it. An interruption (KeyboardInterrupt: the
        caller's thread is usually the main one, where signals land) leaves its rows in
        no known state: every later step refuses until a reset."""
        if isinstance(e, Exception):
            self.control.fail(f"the env's {what} failed: {type(e).__name__}: {e}")
        else:
            self.broken = (f"a step was interrupted ({type(e).__name__}) in the middle of its {what}: "
                           f"call reset() to go on (every game restarts)")


class SupervisorThread:
    """The supervisor's event loop on a thread of its own, with a Bridge for answerer."""

    def __init__(self, recipe, run_dir, opponent: tuple | None = None):
        """`opponent`: env/opponent.py's Opponent arguments (rows it plays, (network,
        version), greedy), or None."""
        import torch  # noqa: F401, PLC0415 (see below)

        from w3async.compose import supervisor  # noqa: PLC0415

        # torch imported on this (the caller's) thread: the run's thread imports it on first
        # use, and a torch first imported on that daemon thread crashed the process at exit
        # (SIGSEGV after an uncaught exception, test_env's exit without close()). A recipe
        # no longer imports torch when it loads, so it is done here.

        self.bridge: Bridge | None = None
        made = threading.Event()

        def answerer(control):  # made after the slots, before any game starts
            if self.seed is not None:
                self.sup.seed_games(self.seed)
            other = None
            if opponent is not None:
                from w3async.env.opponent import Opponent  # noqa: PLC0415 (torch only with an opponent)

                other = Opponent(control, *opponent)
            self.bridge = Bridge(control, other)
            made.set()
            return self.bridge

        # signals=False: the caller's thread owns SIGINT (a loop off the main thread cannot take it)
        # cluster=None: the env's rows are this machine's (a [cluster] recipe is refused, saying so)
        self.sup = supervisor(recipe, run_dir, answerer=answerer, signals=False, cluster=None)
        self.error: str | None = None
        self.stats: dict = {}
        self.seed = None  # slot -> the W3S_SEED of its first start, or None (set before start())
        self._thread = threading.Thread(target=self._main, name="w3async-supervisor", daemon=True)
        self._made = made

    def start(self, timeout_s: float = 120.0) -> Bridge:
        self._thread.start()
        while not self._made.wait(0.1):
            if not self._thread.is_alive():
                raise EnvClosed(f"the run did not start: {self.error}")
            timeout_s -= 0.1
            if timeout_s <= 0:
                raise EnvClosed("the supervisor made no answerer within its start time")
        return self.bridge

    def _main(self) -> None:
        from w3async.runtime.supervisor import RunError  # noqa: PLC0415

        try:
            self.stats = eventloop.run(self.sup.run())
            self.error = None
        except RunError as e:
            self.error = str(e)
        except BaseException as e:  # noqa: BLE001 (said to the caller's thread, not lost with this one)
            self.error = f"{type(e).__name__}: {e}"
        finally:
            b = self.bridge
            if b is not None:
                with b.lock:
                    b.ended = self.error or "the run stopped (closed, or a stop condition of its recipe)"
                    b.wake_thread()

    def call(self, fn, *args) -> None:
        """Run fn(*args) on the supervisor's loop (nothing when it has ended)."""
        loop = self.bridge.loop if self.bridge else None
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # closed meanwhile
                pass

    def stop(self, timeout_s: float = 60.0) -> None:
        """Ask the run to stop and wait for its shutdown (games ended, shared memory unlinked)."""
        if self._thread.is_alive():
            self.call(self.sup.request_stop)
            self._thread.join(timeout_s)
        if self.bridge is not None and not self._thread.is_alive():
            self.bridge.close()
