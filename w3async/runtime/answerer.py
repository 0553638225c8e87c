"""The contract between the supervisor and whatever answers rows.

The supervisor gathers waiting rows into a Batch and hands it to its `Answerer`: a fixed
policy (runtime/policies.py, `PolicyAnswerer`) answers at once, the learning side
(learn/training.py, `Training`) asynchronously through its inference engine. An
answerer never holds the supervisor itself: it gets a `RunControl`, the narrow handle
back (answer rows, hold and release them, schedule a round, fail the run with a reason,
know whether the run is stopping, the run's events and counters).

Counters live in one place, `Counters`: the supervisor, the answerers, /status and the
checkpoints read the same object.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np

from w3async.games.spec import GameSpec
from w3async.observe.logs import JsonLog
from w3async.runtime.life import RunContext
from w3async.runtime.thread_rounds import ThreadRounds
from w3async.sync.gather import Batch


class RunFailure(RuntimeError):
    """An error that is the run's cause, said as it is (no traceback): a checkpoint that
    cannot be written or loaded, a failed round. The message names what and why."""


@dataclass
class Counters:
    """The run's counters: agent steps answered, rounds answered, bad rows seen."""

    agent_steps: int = 0  # the whole run's, a resumed run's checkpoint included
    rounds: int = 0  # this process's
    bad_rows: int = 0
    resumed_steps: int = 0  # the agent steps a resume started from (rows a round: the steps since over the rounds)


@dataclass(frozen=True)
class GameRows:
    """One game slot's rows as an answerer sees them: which rows, and the group they
    come from (its role, sides and environment say who plays whom)."""

    index: int
    row0: int
    nrows: int
    group: object  # recipes.GameGroup (not imported: recipes reaches learn's configs, learn this module)


@dataclass(frozen=True)
class Ticket:
    """Rows held for one round, and their generations when taken (RunControl.take)."""

    rows: np.ndarray
    gens: np.ndarray


class SplitRows:
    """The run's rows when some are game hosts' (a [cluster] recipe): rows below
    n_local are this host's table's, answered, held and released by its gatherer; the
    rest go through the cluster link (cluster/link.py), named by the host's generation
    of the round they came in. The same hold/release/answer as the gatherer's, so
    RunControl makes one call either way (a single-host run uses the gatherer itself)."""

    def __init__(self, gatherer, link, n_local: int, n_rows: int):
        self._here, self._link, self._n_local = gatherer, link, n_local
        self.host_gen = np.zeros(n_rows, np.int64)  # a game host's row: its generation there (arrived())

    def hold(self, rows: np.ndarray) -> None:
        self._here.hold(rows[rows < self._n_local])  # a host's rows are held there from the moment they were sent

    def release(self, rows: np.ndarray) -> None:
        here = rows < self._n_local
        self._here.release(rows[here])
        if not here.all():  # (the link sends nothing once the run stops)
            far = rows[~here]
            self._link.release(far, self.host_gen[far])

    def answer(self, rows: np.ndarray, obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray,
               release: bool = False) -> None:
        here = rows < self._n_local
        if here.any():
            self._here.answer(rows[here], obs_seq[here], actions[here], versions[here], release=release)
        if not here.all():
            far = ~here
            self._link.answer(rows[far], self.host_gen[rows[far]], obs_seq[far], actions[far], versions[far])


class RunControl:
    """What an answerer may do to the run. Made by the supervisor; every method is
    called on the loop's thread, except: fail() and request_stop() from any thread, and,
    by an answerer that `gathers` (its own thread runs the rounds: the env's bridge),
    answer() holding `lock` and `thread_rounds` (runtime/thread_rounds.py).

    `lock` is held by the loop wherever the rows' state changes under such an answerer
    (a round's gather and submit, a game's attach and detach, the env opponent's
    answers): a thread that answers
    under it sees no row gathered twice, no ticket half released, and no act doorbell
    closed, or its number reused, while it rings."""

    def __init__(self, ctx: RunContext, spec: GameSpec, counters: Counters, slots: list, table, gatherer,
                 cluster, schedule_round: Callable[[], None], make_answerer: Callable[["RunControl"], "Answerer"]):
        # the supervisor makes it; answerers see only these methods
        self._ctx, self._gatherer, self._table, self._slots = ctx, gatherer, table, slots
        self._schedule_round = schedule_round
        self.lock = threading.RLock()
        self._loop_thread = threading.get_ident()  # made on the loop's thread (Supervisor.setup)
        self.recipe = ctx.recipe  # recipes.Recipe
        self.run_dir: Path = ctx.run_dir
        self.spec: GameSpec = spec
        self.counters: Counters = counters
        self.games = [GameRows(s.index, s.row0, s.nrows, s.group) for s in slots]
        # With a cluster, the game hosts' rows follow the table's (SplitRows routes them).
        self._remote = cluster
        self.n_rows: int = table.n_rows + (cluster.n_rows if cluster is not None else 0)
        self.local: bool = cluster is None  # every row is this host's table's (none a game host's)
        self._rows = gatherer if cluster is None else SplitRows(gatherer, cluster, table.n_rows, self.n_rows)
        if cluster is not None:
            self.games += cluster.games
        self._gen = np.zeros(self.n_rows, np.int64)  # each row's resets so far
        self._in_flight = np.zeros(self.n_rows, bool)  # held by a ticket not yet answered or released
        # an answerer that gathers: its rounds on its own thread, and the doorbells it waits on
        self.thread_rounds = ThreadRounds(self, gatherer, ctx.loop, schedule_round)
        # Made last, from this control whole (its tickets, holds and answers); told of resets.
        # A maker that refuses (a checkpoint of another network) raises here, before any game.
        self.answerer: Answerer = make_answerer(self)

    @property
    def events(self) -> JsonLog:
        return self._ctx.events

    @property
    def stopping(self) -> bool:
        """The run is shutting down: answers are no longer written."""
        return self._ctx.life.stopping

    # ---- tickets: the stale-answer rule, in one place ------------------------------
    # A game that restarts while a round computes for its rows must not get that round's
    # answer, nor have the new game's hold released by it: rows_reset() bumps the rows'
    # generation, and answer()/release() act only on the rows of a ticket whose
    # generation is still current and which are still in flight.

    def take(self, rows: np.ndarray) -> "Ticket":
        """Hold rows for a round (or for back-pressure) and return their ticket: the
        rows and their generations. Each row stays held until answer() or release()
        of this ticket, or until its game resets. A game host's rows are held there
        from the moment they were sent."""
        rows = np.asarray(rows, np.int64)
        self._in_flight[rows] = True
        self._rows.hold(rows)
        return Ticket(rows, self._gen[rows].copy())

    def in_flight(self, rows: np.ndarray) -> np.ndarray:
        """Which of rows are held by a ticket not yet answered or released."""
        return self._in_flight[rows]

    @property
    def generations(self) -> np.ndarray:
        """Every row's generation now: the array itself, to read under the lock (an
        answerer's C copies read a round's rows' from it), never to write."""
        return self._gen

    def generation(self, rows) -> np.ndarray:
        """The rows' generations now (a game host sends them with its rounds and resets)."""
        return self._gen[rows].copy()

    def current(self, ticket: "Ticket") -> np.ndarray:
        """Which of the ticket's rows it still holds: their game did not reset since
        take() and nothing answered or released them."""
        return (self._gen[ticket.rows] == ticket.gens) & self._in_flight[ticket.rows]

    def answer(self, ticket: "Ticket", obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray) -> np.ndarray:
        """Publish answers (aligned with ticket.rows) for the ticket's current rows,
        release them, count them, and stop the run when its step limit is reached.
        Stale rows are dropped (the gatherer drops answers for rows re-posted since
        obs_seq too). Returns the mask of the rows answered."""
        keep = self.current(ticket)
        if np.count_nonzero(keep) == len(keep):  # the usual round: no row went stale, no selection to copy
            rows = ticket.rows
        else:
            rows = ticket.rows[keep]
            obs_seq, actions, versions = obs_seq[keep], actions[keep], versions[keep]
        if not len(rows):
            return keep
        self._in_flight[rows] = False
        self._publish(rows, obs_seq, actions, versions, held=True)
        return keep

    def answer_now(self, rows: np.ndarray, obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray) -> None:
        """Answer rows of the batch being submitted, in the same call (a fixed policy):
        no ticket, as no game can reset between the gather and this answer on the loop's
        thread. Saves take()'s hold and release on the hot path."""
        self._publish(np.asarray(rows), obs_seq, actions, versions)

    def _publish(self, rows: np.ndarray, obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray,
                 held: bool = False) -> None:
        """Write the answers (unless the run is stopping), count them, and stop the run
        when its step limit is reached. held: this host's rows are held (a ticket's) and
        are released in the same call (the gatherer drops an answer to a held row)."""
        if self._ctx.life.stopping:
            if held:
                self._rows.release(rows)
        else:
            self._rows.answer(rows, obs_seq, actions, versions, release=held)
        self.counters.agent_steps += len(rows)
        self.counters.rounds += 1
        if self.recipe.stop.steps_reached(self.counters.agent_steps):
            self.request_stop()

    def held_as_gathered(self, rows: np.ndarray) -> None:
        """Rows a gather held as it took them (ThreadRounds.run): in flight, as take()'s."""
        self._in_flight[rows] = True

    def release(self, ticket: "Ticket") -> np.ndarray:
        """Let the ticket's current rows be gathered again, unanswered (back-pressure
        ended, or a game host's round is to be sent again). Returns the mask released."""
        keep = self.current(ticket)
        rows = ticket.rows[keep]
        if len(rows):
            self._in_flight[rows] = False
            self._rows.release(rows)
        return keep

    def rows_reset(self, rows: slice) -> None:
        """A game's rows were reset (it exited, restarts, or its host was lost): every
        ticket taken for them before is stale from now on. Then the answerer drops
        what it keeps for them."""
        self._gen[rows] += 1
        self._in_flight[rows] = False
        self.answerer.rows_reset(rows)

    def arrived(self, rows: np.ndarray, host_gen: np.ndarray) -> None:
        """A game host's round for rows arrived, at the host's generations host_gen:
        their answer or release goes back naming them (the host drops it otherwise)."""
        self._rows.host_gen[rows] = host_gen

    def schedule_round(self) -> None:
        self._schedule_round()

    def waiting_rows(self) -> int:
        """Rows waiting for an answer anywhere (gathered, held or not yet seen)."""
        g = self._gatherer
        here = int(np.count_nonzero((self._table.column("obs_seq") != g.acked) & (g.row_game != -1)))
        return here + (self._remote.waiting_rows() if self._remote is not None else 0)

    def restarts(self) -> int:
        """Game restarts so far, every slot's (the dashboard's `restarts`)."""
        return sum(s.restarts for s in self._slots)

    def fail(self, reason: str) -> None:
        """End the run with this cause (a clean shutdown follows). From any thread."""
        self._on_loop(self._ctx.life.fail, reason)

    def request_stop(self) -> None:
        """End the run normally (a stop condition of the answerer's, e.g. updates). From any thread."""
        self._on_loop(self._ctx.life.request_stop)

    def _on_loop(self, fn, *args) -> None:
        """fn(*args) now on the loop's thread, or soon there from another (the run's stop
        event is the loop's)."""
        if threading.get_ident() == self._loop_thread:
            fn(*args)
            return
        try:
            self._ctx.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the run is over already
            pass


class Answerer(Protocol):
    """Whatever answers the supervisor's rounds."""

    failure: str | None
    """Why the answerer ends the run (None while it does not)."""

    gathers: bool
    """True: its own thread runs the rounds (RunControl.thread_rounds, waiting on
    its obs_bells), the loop reads no obs doorbell, and it is a GatheringAnswerer.
    False: the loop gathers (every answerer declares it)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Before the first game starts (off the loop: it may load a network)."""

    def submit(self, batch: Batch) -> None:
        """Answer a gathered batch, now or later, through RunControl.answer. The batch's
        buffers are reused by the next gather: copy what outlives the call."""

    def rows_reset(self, rows: slice) -> None:
        """A game's rows were reset (it exited or restarts): drop what is pending for them."""

    def flush_round_stats(self) -> dict | None:
        """Once a second: the last interval's rounds as one inference.jsonl line."""

    def progress(self) -> str:
        """A few words for the console's progress line ('' for none)."""

    def stop(self) -> None:
        """After the games ended (off the loop): finish, save, close."""


class GatheringAnswerer(Answerer, Protocol):
    """An answerer whose own thread runs the rounds (`gathers` True: the env's bridge)."""

    def wake_thread(self) -> None:
        """The obs doorbells changed (RunControl.lock held): wait on the new set."""

    def submit(self, batch: Batch, held: bool = False) -> None:
        """As Answerer.submit; held: the batch's rows were taken as they were gathered
        (ThreadRounds.run's), so it answers them with their generations now."""


class QuietAnswerer:
    """Defaults for an answerer that keeps no round lines, says nothing on the progress
    line and has nothing to close (the env's bridge, a game host's remote answerer)."""

    failure: str | None = None
    gathers = False

    def flush_round_stats(self) -> dict | None:
        return None

    def progress(self) -> str:
        return ""

    def stop(self) -> None:
        pass
