"""The learning side wired into the supervisor's rounds (recipes with policy = "network").

    round (loop thread)                 worker thread          learner thread
    gather -> episodes, opponents  ->   engine: networks  ->   (answers)
           -> trajectories.record_obs                          trajectories.get()
           -> engine.submit, rows held                         PPO update, paced
    answered: release, answer, ring,                           publish weights, league
              trajectories.record_answer                       snapshot, checkpoint

Which network answers a row: evaluation rows and the first side of every lane play the
current policy (slot 0); in self-play groups (two agent sides) the second side plays,
for each episode, either the current policy or a past snapshot sampled from the league
(loaded into one of the engine's past-snapshot slots). Only rows the current policy
answers in "train" groups reach the learner; evaluation groups are never trained on.

Back-pressure: when the learner's queue is full, the train rows are held (they wait,
unanswered) until the learner takes a batch; the time is measured by the trajectories.
A game restart cuts its rows' partial sequences (never a finished episode) and a late
answer never lands on the new game's rows (gather.answer checks the sequence), nor on
their trajectories or holds (each row's reset count is compared when a round comes back).

A round's order (round()): opponents picked, then engine.submit, and only once the engine
took the round are its rows held and recorded (episodes, returns, trajectories). A
submit that fails raises RoundError to the caller with nothing recorded (the old order
recorded first: after a refused submit the same rows were "recorded again before their
answer" on every round, issue 9 item 5) and the run stops with the cause.

Resume (in the constructor, before anything is written): the checkpoint, its learner
state and every league snapshot it names must load, or CheckpointLoadError (the file and
the cause) stops the run; the good checkpoint is never rewritten. A checkpoint records,
with its counters, the size of each log it covers (counters["logs"]): a resumed run moves
each log's lines beyond that size (the dead tail of a killed run) into <log>.cut and
writes a `resume` record, so updates, episodes and rows are never counted twice.

Failures: Training.failure (str or None) is the reason the learning side wants the run
to end (a learner exception, a checkpoint that cannot be written, a round that failed);
the supervisor is told through _finish. stop() raises CheckpointError when the last
checkpoint cannot be written (after the engine is stopped and the logs closed); the
previous checkpoint is then intact and `latest` still names it.

Why one module of ~580 lines: it is one answerer with one state (the rows' roles,
opponents, holds and epochs in flight), read by the round path, the episode tallies and
the learner thread together; the resume's log clean-up is in resume.py, the engine,
trajectories, learner and league in their own modules. The next split is the episode
and evaluation tallies.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import threading
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch

from w3async import games
from w3async.sync import layout
from w3async.learn.checkpoint import CKPT_DIR, CheckpointError, CheckpointLoadError, describe, load_latest, save_checkpoint
from w3async.sync.gather import Batch
from w3async.learn.inference import InferenceEngine
from w3async.learn.league import League, OpponentSlots
from w3async.learn.learner import Learner
from w3async.observe.logs import JsonLog
from w3async.learn.network import Network
from w3async.recipes import recipe_to_dict
from w3async.learn.resume import LOGS, cut_logs
from w3async.learn.trajectories import Trajectories
from w3async.runtime.answerer import RunControl, RunFailure

TRAIN, EVAL = 0, 1


class RoundError(RunFailure):
    """A round that could not be submitted (or rows submitted again before their answer).
    Raised to the caller of Training.submit() with nothing recorded for the round's rows;
    the run is asked to stop with it as the cause (Training.failure)."""


def _subset(res, keep: np.ndarray):
    """A RoundResult of the rows where keep is True (its stats count only those rows)."""
    return res._replace(rows=res.rows[keep], obs_seq=res.obs_seq[keep], actions=res.actions[keep],
                        logp=res.logp[keep], value=res.value[keep], versions=res.versions[keep],
                        slot=res.slot[keep], state_in=None if res.state_in is None else res.state_in[keep],
                        stats=replace(res.stats, rows=int(keep.sum())))


class Training:
    """The learning side as the supervisor's Answerer (runtime/answerer.py): owns the
    engine, the trajectories, the learner and its thread, the league, the evaluation
    tallies and the checkpoints of one run, and reaches the run only through its
    RunControl."""

    def __init__(self, control: RunControl):
        r = control.recipe
        self.control, self.recipe, self.run_dir = control, r, Path(control.run_dir)
        self.counts = control.counters  # agent steps and rounds: the run's, one place
        n_rows = control.n_rows
        self.engine = InferenceEngine(control.spec, r.network, device=r.inference.device, n_slots=r.inference.n_slots,
                                      max_rows=n_rows, n_table_rows=n_rows, num_threads=r.inference.num_threads,
                                      seed=r.inference.seed)
        self.traj = Trajectories(n_rows, r.trajectories, state_dim=r.network.d_model if r.network.gru else None)
        torch.manual_seed(r.inference.seed)
        self.learner = Learner(Network(control.spec, r.network), r.learner, device=r.inference.device, pause=self._pause)
        self.learner.net.load_state_dict(self.engine.nets[0].state_dict())
        self.league = League(self.run_dir, r.league)
        self.opponents = OpponentSlots(r.inference.n_slots - 1, self.engine.load_slot)
        # per table row
        self.row_role = np.zeros(n_rows, np.int8)
        self.row_league = np.zeros(n_rows, bool)  # the second side of a self-play lane
        self.row_slot = np.zeros(n_rows, np.int16)  # the engine slot answering it this episode
        self.row_return = np.zeros(n_rows, np.float64)
        self.row_label: list[str] = ["self"] * n_rows
        self.row_game = np.full(n_rows, -1, np.int32)
        for s in control.games:
            rows = np.arange(s.row0, s.row0 + s.nrows)
            self.row_role[rows] = EVAL if s.group.role == "eval" else TRAIN
            self.row_game[rows] = s.index
            label = games.get(r.game).opponent_of(s.group.env)  # the game labels its opponents
            for i in rows:
                self.row_label[i] = label
            if s.group.role == "train" and s.group.sides == 2:
                self.row_league[rows[1::2]] = True
        # tallies
        self.episodes = 0
        self.eval_window: dict[str, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=r.evaluation.window))
        self.eval_totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.eval_since_ckpt: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.updates_done = 0
        self.last_update: dict = {}
        self.last_checkpoint: str | None = None
        self.learner_phase = "idle"
        self.nonfinite_outputs = 0  # rounds whose network output was not finite (must stay 0)
        self.nonfinite_batches = 0  # learner batches with a non-finite input (must stay 0)
        self._held: list[np.ndarray] = []
        self._inflight = 0
        self._round_stats: list = []
        self._waiting: list[tuple[int, int]] = []  # per round: (rows gathered, rows waiting in all)
        # Rounds in flight, per table row: `_live` (a round for it is computing; it must
        # not be submitted again before the answer) and `_epoch` (its resets so far: an
        # answer for an earlier epoch is stale and touches neither holds nor trajectories).
        self._live = np.zeros(n_rows, bool)
        self._epoch = np.zeros(n_rows, np.int64)
        self.rows_submitted = 0  # rows the engine took
        self.rows_answered = 0  # of those, answered while their row still waited for it
        self.rows_stale = 0  # of those, whose game restarted before the answer (dropped)
        self.answer_errors = 0  # answers for a row that was not waiting for one (must stay 0)
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._saved: tuple | None = None  # (version, agent_steps, episodes) of the last checkpoint
        ckpt = self._load_checkpoint()  # CheckpointLoadError: nothing written yet
        cut = cut_logs(self.run_dir, ckpt, self.learner.version)
        self.episodes_log = JsonLog(self.run_dir / "episodes.jsonl")
        self.learner_log = JsonLog(self.run_dir / "learner.jsonl")
        self.inference_log = JsonLog(self.run_dir / "inference.jsonl")
        if ckpt is not None or any(cut.values()):
            self._log_resume(ckpt, cut)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.engine.start()
        self.engine.publish(self.learner.net.state_dict(), self.learner.version)
        self._thread = threading.Thread(target=self._learn, name="w3s-learner", daemon=True)
        self._thread.start()

    def _load_checkpoint(self) -> dict | None:
        """Load the latest checkpoint into the learner, the league and the counters, or
        raise CheckpointLoadError (nothing is written before or by this)."""
        ckpt = load_latest(self.run_dir)
        if ckpt is None:
            return None
        path = ckpt["path"]
        try:
            self.learner.load_state_dict(ckpt["learner"])
        except Exception as e:  # noqa: BLE001 (shapes of another network, a truncated state)
            raise CheckpointLoadError(path, "its learner state does not load into this recipe's network "
                                            f"({describe(e)})") from e
        try:
            self.league.load_state_dict(ckpt["league"])
        except CheckpointLoadError as e:
            raise CheckpointLoadError(e.path, f"{e.cause} (named by the checkpoint {path})", e.errno) from e
        c = ckpt["counters"]
        try:
            self.counts.agent_steps = int(c.get("agent_steps", 0))
            self.episodes = int(c.get("episodes", 0))
            for level, counts in c.get("eval_totals", {}).items():
                self.eval_totals[level].update(counts)
        except (TypeError, ValueError, AttributeError) as e:
            raise CheckpointLoadError(path, f"its counters are malformed ({describe(e)})") from e
        self.updates_done = self.learner.version
        self.last_checkpoint = path
        self._saved = (self.learner.version, self.counts.agent_steps, self.episodes)
        return ckpt

    def _log_resume(self, ckpt: dict | None, cut: dict[str, int]) -> None:
        """A `resume` record in each log (and events.jsonl): the checkpoint's counters,
        which every line after it continues from, and the lines cut."""
        rec = dict(checkpoint=ckpt["path"] if ckpt else None, updates=self.learner.version,
                   agent_steps=self.counts.agent_steps, episodes=self.episodes)
        for name, log in (("learner.jsonl", self.learner_log), ("episodes.jsonl", self.episodes_log),
                          ("inference.jsonl", self.inference_log)):
            log.info("resume", **rec, cut_lines=cut.get(name, 0))
        if ckpt is not None:
            self.control.events.info("resume", **rec, snapshots=len(self.league.snapshots), cut_lines=cut)
        else:
            self.control.events.warning("logs_cut", reason="no checkpoint: the run starts from zero", cut_lines=cut)

    def stop(self) -> None:
        """Stop the learner thread (its update finishes), end the worker, write a last
        checkpoint (unless nothing changed since the last one), close the logs. Called by
        the supervisor after the games are ended. Raises CheckpointError when the last
        checkpoint cannot be written: the previous one is intact, and `failure` says so."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.engine.stop()
            if self._saved != (self.learner.version, self.counts.agent_steps, self.episodes):
                self.checkpoint()
        except CheckpointError as e:
            self._fail(f"last checkpoint failed: {e}")
            self._event("error", "checkpoint_failed", path=e.path, cause=e.cause, final=True)
            raise
        finally:
            for log in (self.episodes_log, self.learner_log, self.inference_log):
                log.close()

    def _fail(self, reason: str) -> None:
        """Record why the learning side ends the run (the first reason wins)."""
        if self.failure is None:
            self.failure = reason

    def _event(self, level: str, event: str, **kw) -> None:
        ev = self.control.events
        if ev is not None:
            try:
                getattr(ev, level)(event, **kw)
            except ValueError:  # closed by a shutdown that already finished
                pass

    def counters(self) -> dict:
        return dict(agent_steps=self.counts.agent_steps, episodes=self.episodes, updates=self.learner.version,
                    eval_totals={k: dict(v) for k, v in self.eval_totals.items()})

    def checkpoint(self) -> Path:
        """Write a checkpoint: the learner, the league, and the counters with the size of
        each log at the same moment (taken on the loop thread, between two callbacks, so
        that the logs hold exactly what the counters count). Raises CheckpointWriteError
        (the previous checkpoint intact)."""
        version = self.learner.version
        counters = self._on_loop(lambda: self._capture(version))
        path = save_checkpoint(self.run_dir, learner=self.learner.state_dict(), counters=counters,
                               league=self.league.state_dict(), recipe=recipe_to_dict(self.recipe),
                               keep=self.recipe.checkpoint.keep)
        self.last_checkpoint = str(path)
        self._saved = (version, counters["agent_steps"], counters["episodes"])
        return path

    def _capture(self, version: int) -> dict:
        """The counters and the logs' sizes, consistent with each other: the rounds
        answered so far are flushed into inference.jsonl and this checkpoint's
        evaluation line is written first. Runs on the loop thread (or with no loop)."""
        self.flush_round_stats()
        summary = {k: dict(v) for k, v in self.eval_since_ckpt.items()}
        self.episodes_log.info("evaluation", updates=version,
                               checkpoint=str(self.run_dir / CKPT_DIR / f"ckpt-{version:08d}.pt"),
                               since_last=summary, win_rate=self.win_rates())
        self.eval_since_ckpt.clear()
        c = self.counters()
        c["logs"] = {}
        for name in LOGS:
            try:
                c["logs"][name] = os.stat(self.run_dir / name).st_size
            except OSError:
                c["logs"][name] = 0
        return c

    def _on_loop(self, fn):
        """fn() on the supervisor's loop thread, waiting for it; directly when called
        there, or when the loop does not run (a test without one, the loop gone)."""
        loop = self._loop
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

    # ---- rounds (the loop thread) -----------------------------------------------------

    def submit(self, b: Batch) -> None:
        """Answer a gathered batch through the networks (asynchronously). Raises
        RoundError when the engine does not take the round: nothing of it is recorded
        (no trajectory step, no episode, no hold), and the run is asked to stop."""
        n = b.n
        rows = b.rows[:n].astype(np.int64)
        # Rows waiting anywhere (gathered now, held in flight or by back-pressure): the
        # share a round answers of them says how well rounds batch (inference.jsonl).
        self._waiting.append((n, self.control.waiting_rows()))
        if self.traj.full:
            # Back-pressure: the train groups' rows wait, unanswered and unseen, until the
            # learner takes a batch (unblock); evaluation rows go on.
            waiting = self.row_role[rows] == TRAIN
            if waiting.any():
                self.control.hold(rows[waiting])
                self._held.append(rows[waiting])
                b.select(~waiting)
                n = b.n
                rows = b.rows[:n].astype(np.int64)
        if not n:
            return
        if self.failure is not None:  # the run is ending with its cause: no more rounds
            return
        again = rows[self._live[rows]]
        if again.size:
            raise self._round_failed(f"rows {again[:8].tolist()} submitted again before their answer")
        ended = self._ended_episodes(b, rows)  # labelled by the opponent they were played against
        self._pick_opponents(b, rows)
        try:
            fut = self.engine.submit(b, self.row_slot[rows])
        except Exception as e:  # noqa: BLE001 (any cause: the caller hears it, nothing is half-recorded)
            raise self._round_failed(f"inference submit failed: {describe(e)}") from e
        self._live[rows] = True
        epochs = self._epoch[rows].copy()
        self.rows_submitted += n
        self.control.hold(rows)
        self._inflight += 1
        loop = self._loop
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(self._answered, f, rows, epochs))
        self._episodes(b, rows, ended)
        train = (self.row_role[rows] == TRAIN) & (self.row_slot[rows] == 0)
        self.traj.record_obs(b, train)

    def _round_failed(self, reason: str) -> RoundError:
        self._fail(reason)
        self._event("error", "round_failed", error=reason)
        self.control.fail(reason)
        return RoundError(reason)

    def _answered(self, fut, rows: np.ndarray, epochs: np.ndarray) -> None:
        self._inflight -= 1
        try:
            res = fut.result()
        except Exception as e:  # noqa: BLE001 (a failed round stops the run with its cause)
            reason = f"inference round failed: {e!r}"
            self._fail(reason)
            self._event("error", "round_failed", error=reason)
            self.control.fail(reason)
            return
        if not (np.isfinite(res.value).all() and np.isfinite(res.logp).all()):
            self.nonfinite_outputs += 1  # the checks keep NaN out of the inputs; count, never answer it
            self.control.events.error("nonfinite_output", rows=res.rows[:8].tolist())
        # Rows whose game restarted while the round computed: their answer is stale. It
        # must not release the rows (a round of the new game may hold them) nor complete
        # a trajectory step of the new game.
        current = self._epoch[rows] == epochs
        if not current.all():
            self.rows_stale += int((~current).sum())
            res = _subset(res, current)
            rows = rows[current]
            if not len(rows):
                return
        self.answer_errors += int(np.count_nonzero(~self._live[rows]))
        self._live[rows] = False
        self.rows_answered += len(rows)
        self.control.release(res.rows)
        self.traj.record_answer(res)
        self._round_stats.append((res.stats, self.learner_phase != "idle"))
        self.control.answer(res.rows, res.obs_seq, res.actions, res.versions)

    def unblock(self) -> None:
        """The learner took a batch: the held train rows may go on."""
        if self._held and not self.traj.full:
            for rows in self._held:
                self.control.release(rows)
            self._held.clear()
            self.control.schedule_round()

    def _ended_episodes(self, b: Batch, rows: np.ndarray) -> list[tuple[int, int, str]]:
        """(row, batch index, opponent label) of the episodes this batch ends, labelled
        before a new opponent is picked."""
        end = (b.flags[: b.n] & (layout.FLAG_DONE | layout.FLAG_TRUNCATED)) != 0
        out = []
        for k in np.flatnonzero(end):
            row = int(rows[k])
            label = self.row_label[row]
            if self.row_league[row]:
                slot = int(self.row_slot[row])
                label = "self" if slot == 0 else f"league:{self.opponents.version[slot]}"
            out.append((row, int(k), label))
        return out

    def _pick_opponents(self, b: Batch, rows: np.ndarray) -> None:
        first = (b.flags[: b.n] & layout.FLAG_FIRST) != 0
        for row in rows[first & self.row_league[rows]]:
            self._pick_opponent(int(row))

    def _episodes(self, b: Batch, rows: np.ndarray, ended: list[tuple[int, int, str]]) -> None:
        """Returns, and the finished episodes (logged): for a round the engine took."""
        n = b.n
        first = (b.flags[:n] & layout.FLAG_FIRST) != 0
        self.row_return[rows[first]] = 0.0
        self.row_return[rows] += b.reward[:n]
        for row, k, label in ended:
            self._log_episode(row, b, k, label)

    def _log_episode(self, row: int, b: Batch, k: int, label: str) -> None:
        r = float(b.reward[k])
        result = "win" if r > 0 else "loss" if r < 0 else "draw"
        if b.flags[k] & layout.FLAG_TRUNCATED and not b.flags[k] & layout.FLAG_DONE:
            result = "truncated"
        role = self.row_role[row]
        self.episodes += 1
        self.episodes_log.info("episode", slot=int(self.row_game[row]), row=row, lane=int(b.lane[k]),
                               side=int(b.side[k]), opponent=label, eval=bool(role == EVAL), result=result,
                               steps=int(b.step[k]), **{"return": round(float(self.row_return[row]), 4)},
                               policy_version=int(self.learner.version))
        if role == EVAL:
            self.eval_window[label].append(1.0 if result == "win" else 0.0)
            self.eval_totals[label][result] += 1
            self.eval_since_ckpt[label][result] += 1

    def _pick_opponent(self, row: int) -> None:
        old = int(self.row_slot[row])
        if old > 0:
            self.opponents.release(old)
        self.row_slot[row] = 0
        snap = self.league.sample_opponent()
        if snap is not None:
            slot = self.opponents.acquire(snap.version, lambda: self.league.load(snap))
            self.row_slot[row] = slot or 0
        if self.row_slot[row] != 0:
            self.traj.cut(np.array([row]))  # its sequence so far was the current policy's

    def rows_reset(self, rows: slice) -> None:
        """A game (re)started on these rows: cut their sequences, free their opponents."""
        idx = np.arange(rows.start, rows.stop)
        self.traj.cut(idx)
        self._epoch[idx] += 1  # a round in flight for these rows comes back stale
        self._live[idx] = False
        if self._held:  # rows re-attached unheld: a later unblock must not release a new round's hold
            self._held = [h[~np.isin(h, idx)] for h in self._held]
        for row in idx:
            if self.row_slot[row] > 0:
                self.opponents.release(int(self.row_slot[row]))
                self.row_slot[row] = 0
        self.row_return[idx] = 0.0
        if self.engine.running:  # a GRU's state per row; queued on the worker
            self.engine.reset_rows(idx)

    def progress(self) -> str:
        """The console's words on learning: updates, the last update's time, win rates."""
        wins = " ".join(f"{k} {v['rate']:.0%}/{v['n']}" for k, v in self.win_rates().items() if v["rate"] is not None)
        upd = self.last_update.get("update_s")
        return f"updates {self.learner.version}" + (f" ({upd:.1f} s)" if upd else "") + (f" | {wins}" if wins else "")

    def win_rates(self) -> dict:
        return {k: dict(rate=round(float(np.mean(v)), 4) if v else None, n=len(v),
                        totals=dict(self.eval_totals[k])) for k, v in sorted(self.eval_window.items())}

    def flush_round_stats(self) -> dict | None:
        """Aggregate the last interval's rounds into one inference.jsonl line."""
        both, self._round_stats = self._round_stats, []
        if not both:
            return None
        st = [x for x, _ in both]
        lat = np.array([x.latency_ms for x in st])
        during = np.array([u for _, u in both])  # the learner was in an update when it came back
        buckets = collections.Counter(str(x.bucket) for x in st)
        rows = sum(x.rows for x in st)
        line = dict(rounds=len(st), rows=rows, rows_per_round=round(rows / len(st), 2),
                    latency_ms_mean=round(float(lat.mean()), 3), latency_ms_p95=round(float(np.percentile(lat, 95)), 3),
                    latency_ms_max=round(float(lat.max()), 3),
                    compute_ms_mean=round(float(np.mean([x.compute_ms for x in st])), 3),
                    net_ms_mean=round(float(np.mean([x.net_ms for x in st])), 3),
                    buckets=dict(buckets), learner_phase=self.learner_phase,
                    latency_ms_idle=round(float(lat[~during].mean()), 3) if (~during).any() else None,
                    latency_ms_update=round(float(lat[during].mean()), 3) if during.any() else None,
                    rounds_update=int(during.sum()))
        waits, self._waiting = self._waiting, []
        if waits:
            g = np.array(waits, float)
            line["waiting_mean"] = round(float(g[:, 1].mean()), 2)
            line["gathered_per_waiting"] = round(float(g[:, 0].sum() / max(g[:, 1].sum(), 1)), 3)
        self.inference_log.info("rounds", **line)
        return line

    # ---- the learner thread -------------------------------------------------------------

    def _pause(self) -> None:
        """Between minibatches: give the rounds the CPU (update_pause_ms)."""
        ms = self.recipe.learner.update_pause_ms
        if ms > 0:
            self.learner_phase = "pause"
            time.sleep(ms / 1e3)
            self.learner_phase = "update"

    def _learn(self) -> None:
        loop = self._loop
        try:
            while not self._stop.is_set():
                tb = self.traj.get(timeout_s=0.25)
                if tb is None:
                    continue
                loop.call_soon_threadsafe(self.unblock)
                if not all(np.isfinite(a).all() for a in (tb.glob, tb.ent, tb.reward, tb.value, tb.logp)):
                    self.nonfinite_batches += 1  # never trained on: the checks should make this impossible
                    self.control.events.error("nonfinite_batch", batch=self.traj.stats.batches)
                    continue
                self.learner_phase = "update"
                wait0 = self.traj.stats.wait_s
                st = self.learner.run_update(tb)
                self.learner_phase = "idle"
                version = self.learner.version
                sd = self.learner.net.state_dict()
                self.engine.publish(sd, version)  # at the update boundary only
                snap = self.league.maybe_snapshot(version, sd)
                self.updates_done = version
                self.last_update = asdict(st)
                self.learner_log.info("update", update=version, update_s=round(st.update_s, 4),
                                      wait_s=round(self.traj.stats.wait_s - wait0, 4),
                                      staleness=round(st.staleness_mean, 3), staleness_max=st.staleness_max,
                                      policy_loss=st.pg_loss, value_loss=st.v_loss, entropy=st.entropy,
                                      approx_kl=st.approx_kl, clip_frac=st.clip_frac,
                                      explained_var=st.explained_var, lr=self.recipe.learner.lr, steps=st.steps,
                                      pause_s=round(st.pause_s, 4), padding=st.padding_mean,
                                      snapshot=snap.version if snap else None,
                                      backpressure_s=round(self.traj.stats.backpressure_s, 3),
                                      cut_steps=self.traj.stats.cut_steps, nonfinite_batches=self.nonfinite_batches,
                                      nonfinite_outputs=self.nonfinite_outputs)
                if version % self.recipe.checkpoint.every_updates == 0:
                    self.checkpoint()
                if self.recipe.stop.updates and version >= self.recipe.stop.updates:
                    loop.call_soon_threadsafe(self.control.request_stop)
                    return
        except CheckpointError as e:  # a disk that is full or read-only: a cause, not a traceback
            self.learner_phase = "failed"
            self._fail(f"checkpoint write failed: {e}")
            self._event("error", "learner_failed", error=str(e), cause="checkpoint_write", path=e.path,
                        errno=e.errno)
            self._tell_supervisor(loop)
        except Exception as e:  # noqa: BLE001 (the run stops cleanly with the cause)
            self.learner_phase = "failed"
            self._fail(f"learner failed: {e!r}")
            self._event("error", "learner_failed", error=repr(e), traceback=traceback.format_exc(limit=4))
            self._tell_supervisor(loop)

    def _tell_supervisor(self, loop) -> None:
        """Hand `failure` to the supervisor's loop as the reason to end the run."""
        try:
            loop.call_soon_threadsafe(self.control.fail, self.failure)
        except RuntimeError:  # the loop is gone: the run is over anyway
            pass
