"""The learner's thread of the training answerer (learn/training.py), and the one way it
reaches the supervisor's loop.

    round (loop thread)  ->  trajectories  ->  LearnerThread: get a batch, PPO update
                                               (paused between minibatches), publish the
                                               weights to the engine, league snapshot,
                                               learner.jsonl, checkpoint, stop at the limit

`LearnerThread` works for its host, Training, through the host's public members (recipe,
traj, learner, engine, league, learner_log, control, unblock, checkpoint,
nonfinite_outputs, learner_failed). Its `phase` (idle, update, pause, failed) tags each
round that comes back, so inference.jsonl tells rounds during an update from the others.

`call_on_loop` runs a function on the supervisor's loop thread and waits for it (the
checkpoint's counters and log sizes are taken there, between two callbacks).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import traceback
from dataclasses import asdict

import numpy as np
import torch

from w3async.learn.checkpoint import CheckpointError


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


class LearnerThread:
    """Takes the trajectories' batches and runs the updates until stop()."""

    def __init__(self, host):
        self.host = host
        self.phase = "idle"
        self.updates_done = 0
        self.last_update: dict = {}  # the last update's LearnerStats, as a dict
        self.nonfinite_batches = 0  # batches with a non-finite input, never trained on (must stay 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="w3s-learner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the update in progress (joins the thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def pause(self) -> None:
        """Between minibatches: give the rounds the CPU (update_pause_ms)."""
        ms = self.host.recipe.learner.update_pause_ms
        if ms > 0:
            self.phase = "pause"
            time.sleep(ms / 1e3)
            self.phase = "update"

    def _run(self) -> None:
        h = self.host
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
                    h.control.events.error("nonfinite_batch", batch=h.traj.stats.batches)
                    continue
                self.phase = "update"
                wait0 = h.traj.stats.wait_s
                st = h.learner.run_update(tb)
                self.phase = "idle"
                version = h.learner.version
                sd = h.learner.net.state_dict()
                h.engine.publish(sd, version)  # at the update boundary only
                snap = h.league.maybe_snapshot(version, sd)
                self.updates_done = version
                self.last_update = asdict(st)
                rec = dict(update=version, update_s=round(st.update_s, 4),
                                   wait_s=round(h.traj.stats.wait_s - wait0, 4),
                                   staleness=round(st.staleness_mean, 3), staleness_max=st.staleness_max,
                                   policy_loss=st.pg_loss, value_loss=st.v_loss, entropy=st.entropy,
                                   approx_kl=st.approx_kl, clip_frac=st.clip_frac,
                                   explained_var=st.explained_var, lr=st.lr, ent_coef=st.ent_coef, steps=st.steps,
                                   minibatches=st.minibatches, minibatches_planned=st.minibatches_planned,
                                   kl_stopped=st.kl_stopped, grad_norm=st.grad_norm,
                                   value_mean=st.value_mean, value_std=st.value_std,
                                   pause_s=round(st.pause_s, 4), padding=st.padding_mean,
                                   snapshot=snap.version if snap else None,
                                   backpressure_s=round(h.traj.stats.backpressure_s, 3),
                                   cut_steps=h.traj.stats.cut_steps, nonfinite_batches=self.nonfinite_batches,
                                   nonfinite_outputs=h.nonfinite_outputs)
                h.learner_log.info("update", **rec)
                h.board.update(rec)  # TensorBoard's learner/* (a queue put)
                if version % h.recipe.checkpoint.every_updates == 0:
                    h.checkpoint()
                if h.recipe.stop.updates and version >= h.recipe.stop.updates:
                    loop.call_soon_threadsafe(h.control.request_stop)
                    return
        except CheckpointError as e:  # a disk that is full or read-only: a cause, not a traceback
            self.phase = "failed"
            h.learner_failed(f"checkpoint write failed: {e}", error=str(e), cause="checkpoint_write", path=e.path,
                             errno=e.errno)
        except Exception as e:  # noqa: BLE001 (the run stops cleanly with the cause)
            self.phase = "failed"
            h.learner_failed(f"learner failed: {e!r}", error=repr(e), traceback=traceback.format_exc(limit=4))
