"""Rounds in flight: the inference worker launches a round and goes on to the next, a
finisher thread waits for each round's device work and resolves its future.

    flights = Flights(depth=2)
    f = flights.acquire()                       # on the worker: blocks while `depth` are in flight
    handle = launch(f)                          # uploads and kernels queued on the device
    flights.hand_over(f, fut, lambda: finish(handle), release=...)
    ...
    flights.close()                             # finishes what is in flight, then ends the thread

Why: on a GPU the worker used to wait on the host for each round before it uploaded the
next, so the next round's gather and upload never overlapped the last one's compute.
A flight index names the per-round device buffers
(staging, pinned outputs) a launch may use: a flight comes back only after its round's
finish ran, so a launch never overwrites what an earlier round still reads.

Futures resolve in launch order (one finisher, FIFO), whatever order the device finishes
in; a finish that raises fails its own future only. Nothing here touches torch: the CPU
path computes in the worker and never uses it, and the tests drive it with host events.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future, InvalidStateError
from typing import Callable


class Flights:
    """At most `depth` rounds launched and not yet finished (see the module docstring)."""

    def __init__(self, depth: int = 2, name: str = "w3s-finish"):
        if depth < 1:
            raise ValueError(f"depth={depth}: at least one round must be able to fly")
        self.depth = depth
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for f in range(depth):
            self._free.put(f)
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._finisher, name=name, daemon=True)
        self._thread.start()
        self.finished = 0
        self.cpu_s = 0.0  # the finisher thread's CPU time so far (a spinning wait shows here)

    def acquire(self) -> int:
        """A free flight index; blocks while `depth` rounds are in flight."""
        return self._free.get()

    def release(self, flight: int) -> None:
        """Give back a flight whose launch failed (nothing of it is in flight)."""
        self._free.put(flight)

    def hand_over(self, flight: int, fut: Future, finish: Callable[[], object],
                  release: Callable[[], None] | None = None) -> None:
        """The round launched on `flight`: the finisher runs finish() (which waits for the
        device) after every round handed over before it, sets fut to its result or its
        error, calls release() (the round's host buffers) and frees the flight."""
        self._todo.put((flight, fut, finish, release))

    def _finisher(self) -> None:
        while True:
            item = self._todo.get()
            if item is None:
                return
            flight, fut, finish, release = item
            try:
                result, error = finish(), None
            except BaseException as e:  # the round's own failure: its future says it
                result, error = None, e
            finally:
                if release is not None:
                    release()
                self._free.put(flight)  # before the future: a waiter may launch at once
                self.finished += 1
                self.cpu_s = time.thread_time()
            try:
                if error is None:
                    fut.set_result(result)
                else:
                    fut.set_exception(error)
            except InvalidStateError:  # cancelled by its caller: nobody waits for it
                pass

    def close(self) -> None:
        """Finish every round handed over, then end the finisher thread."""
        if self._thread.is_alive():
            self._todo.put(None)
            self._thread.join()
