"""The learner's thread of the training answerer (learn/training.py), and the one way it
reaches the supervisor's loop.

    round (loop thread)  ->  trajectories  ->  LearnerThread: get a batch, PPO update
                                               (paused between minibatches), publish the
                                               weights to the engine, league snapshot,
                                               learner.jsonl, checkpoint, stop at the limit

`LearnerThread` gets its parts and a few named callables (`LearnerParts`: what Training
hands it), never Training itself. Its `phase` (idle, update, pause, failed) tags each
round that comes back, so inference.jsonl tells rounds during an update from the others.
`update_record` is learner.jsonl's line of an update, named once from UpdateStats.

`call_on_loop` runs a function on the supervisor's loop thread and waits for it (the
checkpoint's counters and log sizes are taken there, between two callbacks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch

from w3async.learn.checkpoint import CheckpointError
from w3async.learn.learner import UpdateStats


@dataclass(frozen=True)
class LearnerParts:
    """What the learner's thread works with: the training side's parts, and the few
    things it asks of the training side by name."""

    recipe: Any  # its learner (update_pause_ms), checkpoint (every_updates) and stop (updates) sections
    traj: Any  # Trajectories: get(), stats
    learner: Any  # Learner: run_update(), version, net
    engine: Any  # InferenceEngine: publish(), device
    league: Any  # League: maybe_snapshot()
    log: Any  # learner.jsonl (a JsonLog)
    events: Any  # events.jsonl (a JsonLog)
    board: Callable[[dict], None]  # an update's line to TensorBoard (a queue put)
    unblock: Callable[[], None]  # on the loop: rows held for a full trajectory queue may go on
    checkpoint: Callable[[], Any]  # write one now (on this thread; it takes the counters on the loop)
    request_stop: Callable[[], None]  # on the loop: the run's update limit is reached
    failed: Callable[..., None]  # (reason, **event): the learning side ends the run
    nonfinite_outputs: Callable[[], int]  # rounds whose network output was not finite so far


# learner.jsonl's names for UpdateStats' fields where they differ, and the fields rounded
RECORD_NAMES = {"version": "update", "pg_loss": "policy_loss", "v_loss": "value_loss",
                "staleness_mean": "staleness", "padding_mean": "padding"}
RECORD_ROUNDED = {"update_s": 4, "pause_s": 4, "staleness_mean": 3}


def update_record(st: UpdateStats, wait_s: float, snapshot: int | None, traj_stats, nonfinite_batches: int,
                  nonfinite_outputs: int) -> dict:
    """An update's learner.jsonl line: every UpdateStats field (under learner.jsonl's
    name), the learner's wait for this batch, the league snapshot it made, the
    trajectories' backpressure and cut steps, and the non-finite counts (both must stay 0)."""
    rec = {RECORD_NAMES.get(k, k): (round(v, RECORD_ROUNDED[k]) if k in RECORD_ROUNDED else v)
           for k, v in asdict(st).items()}
    rec.update(wait_s=round(wait_s, 4), snapshot=snapshot, backpressure_s=round(traj_stats.backpressure_s, 3),
               cut_steps=traj_stats.cut_steps, nonfinite_batches=nonfinite_batches,
               nonfinite_outputs=nonfinite_outputs)
    return rec


def call_on_loop(loop: asyncio.AbstractEventLoop | None, fn):
    """fn() on the supervisor's loop thread, waiting for it; directly when called
    there, or when the loop does not run (a test without one, the loop gone)."""
    try:
        here = asyncio.get_running_loop() is loop
    except RuntimeError:
        here = False
    if loop is None or here or loop.is_closed() or not loop.is_running():
        return fn()
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def call():
        if fut.set_running_or_notify_cancel():
            try:
                fut.set_result(fn())
            except BaseException as e:  # noqa: BLE001 (handed to the waiting thread)
                fut.set_exception(e)

    try:
        loop.call_soon_threadsafe(call)
    except RuntimeError:  # closed meanwhile
        return fn()
    while True:
        try:
            return fut.result(timeout=1.0)
        except concurrent.futures.TimeoutError:
            if not loop.is_running() and fut.cancel():  # the loop stopped without running it
                return fn()


class UpdatePhase:
    """What the learner's thread is doing ("idle", "update", "pause", "failed"; the
    rounds' statistics read it), and the pause between minibatches that gives the rounds
    the CPU (update_pause_ms). Made before the learner, which calls pause(), and the
    thread, which sets the rest."""

    def __init__(self, pause_ms: float):
        self.now = "idle"
        self._pause_s = pause_ms / 1e3

    def pause(self) -> None:
        if self._pause_s > 0:
            self.now = "pause"
            time.sleep(self._pause_s)
            self.now = "update"


class LearnerThread:
    """Takes the trajectories' batches and runs the updates until stop()."""

    def __init__(self, parts: LearnerParts, phase: UpdatePhase, updates_done: int = 0):
        """updates_done: the learner's version at the start (a resumed run's)."""
        self.parts = parts
        self._phase = phase
        self.updates_done = updates_done
        self.last_update: dict = {}  # the last update's LearnerStats, as a dict
        self.nonfinite_batches = 0  # batches with a non-finite input, never trained on (must stay 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def phase(self) -> str:
        return self._phase.now

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="w3s-learner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the update in progress (joins the thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        h = self.parts
        loop = self._loop
        if h.engine.device.type == "cuda":
            # A thread's current device is its own, cuda:0 until set: the learner's default
            # stream, the publish's clone and its event must be the engine's device's
            # (on a machine with several GPUs).
            torch.cuda.set_device(h.engine.device)
        try:
            while not self._stop.is_set():
                tb = h.traj.get(timeout_s=0.25)
                if tb is None:
                    continue
                loop.call_soon_threadsafe(h.unblock)
                if not all(np.isfinite(a).all() for a in (tb.glob, tb.ent, tb.reward, tb.value, tb.logp)):
                    self.nonfinite_batches += 1  # never trained on: the checks should make this impossible
                    h.events.error("nonfinite_batch", batch=h.traj.stats.batches)
                    continue
                self._phase.now = "update"
                wait0 = h.traj.stats.wait_s
                st = h.learner.run_update(tb)
                self._phase.now = "idle"
                version = h.learner.version
                sd = h.learner.net.state_dict()
                h.engine.publish(sd, version)  # at the update boundary only
                snap = h.league.maybe_snapshot(version, sd)
                self.updates_done = version
                self.last_update = asdict(st)
                rec = update_record(st, h.traj.stats.wait_s - wait0, snap.version if snap else None, h.traj.stats,
                                    self.nonfinite_batches, h.nonfinite_outputs())
                h.log.info("update", **rec)
                h.board(rec)  # TensorBoard's learner/* (a queue put)
                if version % h.recipe.checkpoint.every_updates == 0:
                    h.checkpoint()
                if h.recipe.stop.updates_reached(version):
                    loop.call_soon_threadsafe(h.request_stop)
                    return
        except CheckpointError as e:  # a disk that is full or read-only: a cause, not a traceback
            self._phase.now = "failed"
            h.failed(f"checkpoint write failed: {e}", error=str(e), cause="checkpoint_write", path=e.path,
                     errno=e.errno)
        except Exception as e:  # noqa: BLE001 (the run stops cleanly with the cause)
            self._phase.now = "failed"
            h.failed(f"learner failed: {e!r}", error=repr(e), traceback=traceback.format_exc(limit=4))
