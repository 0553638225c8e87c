"""Rounds on the answerer's own thread, for an answerer that `gathers` (the env's bridge).

Its thread waits on the obs doorbells itself and runs the round when they ring: the
loop's thread is not woken for a post, nor crossed twice a step (measured: 1.9x the env's
steps/s). The run's lock (RunControl.lock) is held around each such round, as the loop
holds it wherever the rows' state changes, so the two never gather the same row twice.
RunControl makes it (`control.thread_rounds`); the supervisor hands it the runtimes' obs
doorbells and closes it at the shutdown, before the doorbells and the table close.
"""

from __future__ import annotations

from typing import Callable

import numpy as np


class ThreadRounds:
    """The obs doorbells an answerer's thread waits on, and its rounds."""

    def __init__(self, control, gatherer, loop, schedule_round: Callable[[], None]):
        self._control, self._gatherer, self._lock = control, gatherer, control.lock
        self._loop, self._schedule_round = loop, schedule_round
        self.obs_bells: list = []  # the obs doorbells the answerer's thread waits on
        self._open = True  # until the shutdown: no round after it (close)

    def add_obs(self, obs) -> bool:
        """A runtime's obs doorbell (sync/doorbells.py's SharedObs), made at its first
        game's start: an answerer that `gathers` waits on it from now on (True); the loop
        reads it otherwise (False)."""
        answerer = self._control.answerer
        if not answerer.gathers:
            return False
        with self._lock:
            self.obs_bells.append(obs)
            answerer.wake_thread()  # under the lock: its eventfds do not close meanwhile
        return True

    def run(self, always: bool) -> None:
        """A round on the calling thread, under the lock: the obs doorbells drained, then,
        if one had rung or `always`, a gather submitted to the answerer (a game rings after
        it posts: with no ring, only rows a round left behind can be waiting). The batch's
        rows come held, as RunControl.take() holds them: submit(b, held=True) answers them
        with their generations now (take() of them again is harmless). Bad rows are left
        to a round on the loop, which restarts their games (the loop's work); nothing
        after close()."""
        with self._lock:
            if not self._open:
                return
            rang = False
            for obs in self.obs_bells:
                rang |= obs.drain()
            if not (rang or always):
                return
            b = self._gatherer.gather(hold=True)  # each row taken as gathered: one C call
            if b.bad:
                self._loop.call_soon_threadsafe(self._schedule_round)
            if b.n:
                self._control.held_as_gathered(b.rows[: b.n].astype(np.int64))  # (an int32 index is 8x slower)
                self._control.answerer.submit(b, held=True)

    def close(self) -> None:
        """The shutdown, before the doorbells and the table close: a round on another
        thread is finished (the lock) and none starts after."""
        with self._lock:
            self._open = False
            self.obs_bells.clear()
