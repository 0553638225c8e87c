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
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from w3async.games.spec import GameSpec
from w3async.observe.logs import JsonLog
from w3async.sync.gather import Batch


class RunFailure(RuntimeError):
    """An error that is the run's cause, said as it is (no traceback): a checkpoint that
    cannot be written or loaded, a failed round. The message names what and why."""


@dataclass
class Counters:
    """The run's counters: agent steps answered, rounds answered, bad rows seen."""

    agent_steps: int = 0
    rounds: int = 0
    bad_rows: int = 0


@dataclass(frozen=True)
class GameRows:
    """One game slot's rows as an answerer sees them: which rows, and the group they
    come from (its role, sides and environment say who plays whom)."""

    index: int
    row0: int
    nrows: int
    group: object  # recipes.GameGroup (not imported: recipes reaches learn's configs, learn this module)


class RunControl:
    """What an answerer may do to the run. Made by the supervisor; every method is
    called on the loop's thread."""

    def __init__(self, sup):  # the supervisor makes it; answerers see only these methods
        self._sup = sup
        self.recipe = sup.recipe  # recipes.Recipe
        self.run_dir: Path = sup.run_dir
        self.spec: GameSpec = sup.spec
        self.counters: Counters = sup.counters
        self.games = [GameRows(s.index, s.row0, s.nrows, s.group) for s in sup.slots]
        # With a cluster, the game hosts' rows follow the table's: rows from n_local on
        # are answered, held and released through the cluster link (cluster/link.py).
        self._n_local = sup.table.n_rows
        self._remote = sup.cluster
        self.n_rows: int = self._n_local + (sup.cluster.n_rows if sup.cluster is not None else 0)
        if sup.cluster is not None:
            self.games += sup.cluster.games

    @property
    def events(self) -> JsonLog:
        return self._sup.events

    @property
    def stopping(self) -> bool:
        """The run is shutting down: answers are no longer written."""
        return self._sup.stopping

    def answer(self, rows: np.ndarray, obs_seq: np.ndarray, actions: np.ndarray, versions: np.ndarray) -> None:
        """Publish answers for rows gathered at obs_seq (stale ones are dropped by the
        gatherer), count them, and stop the run when its step limit is reached."""
        n = len(rows)
        if not self._sup.stopping:
            if self._remote is None:
                self._sup.gatherer.answer(rows, obs_seq, actions, versions)
            else:
                here = rows < self._n_local
                if here.any():
                    self._sup.gatherer.answer(rows[here], obs_seq[here], actions[here], versions[here])
                if not here.all():
                    self._remote.answer(rows[~here], obs_seq[~here], actions[~here], versions[~here])
        self.counters.agent_steps += n
        self.counters.rounds += 1
        self._sup.check_stop_steps()

    def hold(self, rows: np.ndarray) -> None:
        """Leave rows out of the gathers until release() (a round computes for them, or
        the learner's queue is full). A game host's rows are held there from the moment
        they were sent."""
        self._sup.gatherer.hold(rows[rows < self._n_local] if self._remote is not None else rows)

    def release(self, rows: np.ndarray) -> None:
        if self._remote is None:
            self._sup.gatherer.release(rows)
            return
        here = rows < self._n_local
        self._sup.gatherer.release(rows[here])
        if not here.all():
            self._remote.release(rows[~here])

    def schedule_round(self) -> None:
        self._sup.schedule_round()

    def waiting_rows(self) -> int:
        """Rows waiting for an answer anywhere (gathered, held or not yet seen)."""
        g = self._sup.gatherer
        here = int(np.count_nonzero((self._sup.table.column("obs_seq") != g.acked) & (g.row_game != -1)))
        return here + (self._remote.waiting_rows() if self._remote is not None else 0)

    def restarts(self) -> int:
        """Game restarts so far, every slot's (the dashboard's `restarts`)."""
        return sum(s.restarts for s in self._sup.slots)

    def fail(self, reason: str) -> None:
        """End the run with this cause (a clean shutdown follows)."""
        self._sup.fail(reason)

    def request_stop(self) -> None:
        """End the run normally (a stop condition of the answerer's, e.g. updates)."""
        self._sup.request_stop()


class Answerer(Protocol):
    """Whatever answers the supervisor's rounds."""

    failure: str | None
    """Why the answerer ends the run (None while it does not)."""

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
