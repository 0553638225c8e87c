"""The learning side wired into the supervisor's rounds (recipes with policy = "network").

    round (loop thread)                 worker thread          learner thread
    gather -> episodes, opponents  ->   engine: networks  ->   (answers)
           -> trajectories.record_obs                          trajectories.get()
           -> engine.submit, rows held                         PPO update, paced
    answered: release, answer, ring,                           publish weights, league
              trajectories.record_answer                       snapshot, checkpoint

Which network answers a row: evaluation rows and the first side of every lane play the
current policy (the engine's net 0); in self-play groups (two agent sides) the second
side plays, for each episode, either the current policy or a past snapshot sampled from
the league (league.OpponentNets loads it into one of the engine's nets 1..). Only rows
the current policy answers in "train" groups reach the learner.

Back-pressure: when the learner's queue is full, the train rows are held (unanswered)
until the learner takes a batch. A game restart cuts its rows' partial sequences and a
late answer never lands on the new game's rows, trajectories or holds (RunControl keeps each
row's generation; a round's ticket is stale once its game reset).

A round's order (submit()): opponents picked, then engine.submit, and only once the
engine took the round are its rows held and recorded (episodes, returns, trajectories);
a submit that fails raises RoundError with nothing recorded and the run
stops with the cause. Resume (resume.py, in the constructor, before anything is
written): the checkpoint must load whole, or CheckpointLoadError stops the run; the logs'
dead tails are cut. `failure` is the reason the learning side ends the run; stop()
raises CheckpointError when the last checkpoint cannot be written (the previous intact).

Its parts: the episode and round tallies in tallies.py, the learner's thread in
learner_thread.py, the engine, trajectories, learner and league in their own modules.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from w3async import games
from w3async.run_folder import RunFolder
from w3async.sync import layout
from w3async.learn.best import BestKeeper
from w3async.learn.board import Board, BoardSources
from w3async.learn.checkpoint import CheckpointError, describe, save_best, save_checkpoint
from w3async.sync.gather import Batch
from w3async.learn.inference import InferenceEngine
from w3async.learn.league import League, OpponentNets
from w3async.learn.learner import Learner
from w3async.learn.learner_thread import LearnerParts, LearnerThread, UpdatePhase, call_on_loop
from w3async.observe.logs import JsonLog
from w3async.learn.network import Network
from w3async.recipes import recipe_to_dict
from w3async.learn.resume import LOGS, cut_logs, log_resume, restore
from w3async.learn.tallies import EVAL, TRAIN, EpisodeBook, RoundTally
from w3async.learn.trajectories import Trajectories
from w3async.runtime.answerer import RunControl, RunFailure, Ticket



class RoundError(RunFailure):
    """A round that could not be submitted (or rows submitted again before their answer).
    Raised to the caller of Training.submit() with nothing recorded for the round's rows;
    the run is asked to stop with it as the cause (Training.failure)."""


def _subset(res, keep: np.ndarray):
    """A RoundResult of the rows where keep is True (its stats count only those rows)."""
    return res._replace(rows=res.rows[keep], obs_seq=res.obs_seq[keep], actions=res.actions[keep],
                        logp=res.logp[keep], value=res.value[keep], versions=res.versions[keep],
                        net=res.net[keep], state_in=None if res.state_in is None else res.state_in[keep],
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
        n_nets = r.inference.n_nets
        self.engine = InferenceEngine(control.spec, r.network, device=r.inference.device, n_nets=n_nets,
                                      max_rows=n_rows, n_table_rows=n_rows, num_threads=r.inference.num_threads,
                                      seed=r.inference.seed, greedy_twin=r.evaluation.greedy)
        self.traj = Trajectories(n_rows, r.trajectories, state_dim=r.network.d_model if r.network.gru else None,
                                 lay=control.spec.layout)
        torch.manual_seed(r.inference.seed)
        self.phase = UpdatePhase(r.learner.update_pause_ms)  # the learner's thread's, its pause
        # the lr and entropy schedules' horizon: the run's progress
        self.learner = Learner(Network(control.spec, r.network), r.learner, device=r.inference.device,
                               pause=self.phase.pause, progress=self.schedule_progress)
        self.learner.net.load_state_dict(self.engine.nets[0].state_dict())
        self._seconds0 = 0.0  # the run's training seconds before this process (a checkpoint's)
        self._t0 = time.monotonic()
        self.league = League(self.run_dir, r.league)
        self.opponents = OpponentNets(n_nets - 1, self.engine.load_net)
        # per table row
        self.book = EpisodeBook(r, control.games, n_rows)  # each row's slot, role and opponent label
        self.row_role, self.row_label, self.tally = self.book.role, self.book.label, self.book.tally
        self.row_league = np.zeros(n_rows, bool)  # the second side of a self-play lane
        self.row_net = np.zeros(n_rows, np.int16)  # the engine's net answering it this episode
        for s in control.games:
            if s.group.role == "train" and s.group.sides == 2:
                self.row_league[s.row0 + 1:s.row0 + s.nrows:2] = True
        # evaluation.greedy: the evaluation rows' net is the current policy's greedy twin
        self.eval_net = np.int16(self.engine.greedy_net or 0)
        self.row_net[self.row_role == EVAL] = self.eval_net
        self.best = BestKeeper(self.run_dir, self.book.levels, r.evaluation.window,  # best.pt by evaluation (best.py)
                               by=games.get(r.game).scored_by)
        self.round_tally = RoundTally()
        self.last_checkpoint: str | None = None
        self.nonfinite_outputs = 0  # rounds whose network output was not finite (must stay 0)
        # Train rows held by back-pressure (RunControl tickets: a game reset meanwhile
        # makes the release skip its rows, so a new round's hold stays).
        self._held: list[Ticket] = []
        self.rows_submitted = 0  # rows the engine took
        self.rows_answered = 0  # of those, answered while their row still waited for it
        self.rows_stale = 0  # of those, whose game restarted before the answer (dropped)
        self.answer_errors = 0  # answers for a row that was not waiting for one (must stay 0)
        self.failure: str | None = None
        self.gathers = False  # the loop runs its rounds (Answerer.gathers)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._saved: tuple | None = None  # (version, agent_steps, episodes) of the last checkpoint
        ckpt = self._load_checkpoint()  # CheckpointLoadError: nothing written yet
        cut = cut_logs(self.run_dir, ckpt, self.learner.version)
        self.episodes_log = self.tally.log = JsonLog(RunFolder(self.run_dir).episodes_log)
        self.learner_log = JsonLog(RunFolder(self.run_dir).learner_log)
        self.inference_log = self.round_tally.log = JsonLog(RunFolder(self.run_dir).inference_log)
        if ckpt is not None or any(cut.values()):
            self._log_resume(ckpt, cut)
        # TensorBoard and videos (board.py): steps from the restored counters
        self.board = Board(r, self.run_dir, BoardSources(
            counts=self.counts, events=control.events, restarts=control.restarts, updates=lambda: self.learner.version,
            episodes=lambda: self.episodes, take_ended=self.tally.take_ended, win_rates=self.win_rates))
        self.learning = LearnerThread(LearnerParts(  # the learner's thread (learner_thread.py)
            recipe=r, traj=self.traj, learner=self.learner, engine=self.engine, league=self.league,
            log=self.learner_log, events=control.events, board=self.board.update, unblock=self.unblock,
            checkpoint=self.checkpoint, request_stop=control.request_stop, failed=self.learner_failed,
            nonfinite_outputs=lambda: self.nonfinite_outputs), self.phase, updates_done=self.learner.version)

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._t0 = time.monotonic()
        self.engine.start()
        self.engine.publish(self.learner.net.state_dict(), self.learner.version)
        self.learning.start(loop)
        self.board.start()

    def _load_checkpoint(self) -> dict | None:
        """The latest checkpoint into the learner, league and counters (resume.restore), or
        CheckpointLoadError (nothing is written before or by this)."""
        ckpt = restore(self.run_dir, self.learner, self.league, self.counts, self.tally,
                       fallback=self.recipe.checkpoint.fallback, game=self.recipe.game)
        self.best.load()  # best.pt's score: a resumed run replaces it only with a better one
        if ckpt is not None:
            self.last_checkpoint = ckpt["path"]
            self._saved = (self.learner.version, self.counts.agent_steps, self.episodes)
            seconds = ckpt["counters"].get("seconds", 0.0)
            self._seconds0 = float(seconds) if isinstance(seconds, (int, float)) else 0.0
        return ckpt

    def _log_resume(self, ckpt: dict | None, cut: dict[str, int]) -> None:
        if ckpt is not None and not ckpt.get("digested", True):  # loaded only as --trust-undigested asked
            self.control.events.warning("checkpoint_undigested", path=ckpt["path"], trusted_by="--trust-undigested")
        rec = dict(checkpoint=ckpt["path"] if ckpt else None, updates=self.learner.version,
                   agent_steps=self.counts.agent_steps, episodes=self.episodes,
                   refused=ckpt["refused"] if ckpt else [])
        log_resume({"learner.jsonl": self.learner_log, "episodes.jsonl": self.episodes_log,
                    "inference.jsonl": self.inference_log}, self.control.events, rec, ckpt is not None,
                   len(self.league.snapshots), cut)

    def stop(self) -> None:
        """Stop the learner thread (its update finishes), end the worker, write a last
        checkpoint (unless nothing changed since the last one), close the logs. Called by
        the supervisor after the games are ended. Raises CheckpointError when the last
        checkpoint cannot be written: the previous one is intact, and `failure` says so."""
        self.learning.stop()
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
            self.board.close()

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

    @property
    def episodes(self) -> int:
        """Episodes finished in the run (the checkpoint's count included)."""
        return self.tally.count

    @property
    def rows_in_flight(self) -> int:
        """Rows the engine took whose answer has not come back."""
        held = sum(int(self.control.current(t).sum()) for t in self._held)
        return int(self.control.in_flight(slice(None)).sum()) - held

    def counters(self) -> dict:
        return dict(agent_steps=self.counts.agent_steps, episodes=self.episodes, updates=self.learner.version,
                    eval_totals={k: dict(v) for k, v in self.tally.totals.items()},
                    seconds=round(self.run_seconds(), 3))

    def run_seconds(self) -> float:
        """Seconds the run has trained, its resumed parts included."""
        return self._seconds0 + time.monotonic() - self._t0

    def schedule_progress(self) -> float:
        """The schedules' progress (learner.lr_schedule, ent_schedule) when they have no
        horizon of their own: updates over stop.updates, else the run's seconds (across
        resumes) over its time limit, else 0 (a recipe check refuses a linear schedule
        without a horizon)."""
        stop = self.recipe.stop
        if stop.updates:
            return self.learner.version / stop.updates
        limit = self.recipe.stop_after_s
        return self.run_seconds() / limit if limit else 0.0

    def checkpoint(self) -> Path:
        """Write a checkpoint: the learner, the league, and the counters with the size of
        each log at the same moment (taken on the loop thread, between two callbacks, so
        that the logs hold exactly what the counters count). Raises CheckpointWriteError
        (the previous checkpoint intact)."""
        version = self.learner.version
        counters, best = call_on_loop(self._loop, lambda: self._capture(version))
        parts = dict(learner=self.learner.state_dict(), counters=counters, league=self.league.state_dict(),
                     recipe=recipe_to_dict(self.recipe))
        path = save_checkpoint(self.run_dir, **parts, keep=self.recipe.checkpoint.keep)
        self.last_checkpoint = str(path)
        self._saved = (version, counters["agent_steps"], counters["episodes"])
        if best is not None:  # the policy of this checkpoint beats best.pt's by the rule
            save_best(self.run_dir, **parts, best=best)
            self.best.accept(best)
            by_return = best.get("by") == "return"  # a game scored by points: each level's mean return
            self._event("info", "best", updates=version, score=best["score"], previous=best["previous_score"],
                        levels={k: v["mean_return" if by_return else "win_rate"] for k, v in best["levels"].items()},
                        decisive=None if by_return else {k: v["decisive_rate"] for k, v in best["levels"].items()},
                        games=best["games"])
        return path

    def _capture(self, version: int) -> tuple[dict, dict | None]:
        """The counters and the logs' sizes, consistent with each other: the rounds
        answered so far are flushed into inference.jsonl and this checkpoint's
        evaluation line is written first; and the best.pt record when this policy beats
        the best so far (best.py's rule over the same windows). Runs on the loop thread
        (or with no loop)."""
        self.flush_round_stats()
        best = self.best.candidate(self.tally.window, version, self.counts.agent_steps, self.tally.returns)
        self.tally.evaluation_line(version, str(RunFolder(self.run_dir).checkpoints / f"ckpt-{version:08d}.pt"),
                                   score=self.best.score_now(self.tally.window, self.tally.returns))
        c = self.counters()
        c["logs"] = {}
        for name in LOGS:
            try:
                c["logs"][name] = os.stat(self.run_dir / name).st_size
            except OSError:
                c["logs"][name] = 0
        return c, best

    # ---- rounds (the loop thread) -----------------------------------------------------

    def submit(self, b: Batch) -> None:
        """Answer a gathered batch through the networks (asynchronously). Raises
        RoundError when the engine does not take the round: nothing of it is recorded
        (no trajectory step, no episode, no hold), and the run is asked to stop."""
        n = b.n
        rows = b.rows[:n].astype(np.int64)
        # Rows waiting anywhere (gathered now, held in flight or by back-pressure): the
        # share a round answers of them says how well rounds batch (inference.jsonl).
        self.round_tally.waiting.append((n, self.control.waiting_rows()))
        if self.traj.full:
            # Back-pressure: the train groups' rows wait, unanswered and unseen, until the
            # learner takes a batch (unblock); evaluation rows go on.
            waiting = self.row_role[rows] == TRAIN
            if waiting.any():
                self._held.append(self.control.take(rows[waiting]))
                b.select(~waiting)
                n = b.n
                rows = b.rows[:n].astype(np.int64)
        if not n:
            return
        if self.failure is not None:  # the run is ending with its cause: no more rounds
            return
        again = rows[self.control.in_flight(rows)]
        if again.size:
            raise self._round_failed(f"rows {again[:8].tolist()} submitted again before their answer")
        ended = self._ended_episodes(b, rows)  # labelled by the opponent they were played against
        self._pick_opponents(b, rows)
        try:
            fut = self.engine.submit(b, self.row_net[rows])
        except Exception as e:  # noqa: BLE001 (any cause: the caller hears it, nothing is half-recorded)
            raise self._round_failed(f"inference submit failed: {describe(e)}") from e
        self.rows_submitted += n
        ticket = self.control.take(rows)
        loop = self._loop
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(self._answered, f, ticket))
        self.book.record(b, rows, ended, int(self.learner.version))
        train = (self.row_role[rows] == TRAIN) & (self.row_net[rows] == 0)
        self.traj.record_obs(b, train)

    def _round_failed(self, reason: str) -> RoundError:
        self._fail(reason)
        self._event("error", "round_failed", error=reason)
        self.control.fail(reason)
        return RoundError(reason)

    def _answered(self, fut, ticket: Ticket) -> None:
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
        # must not complete a trajectory step of the new game (RunControl.answer drops it
        # and leaves the new game's hold alone).
        if not np.array_equal(res.rows, ticket.rows):
            self.answer_errors += len(ticket.rows)  # the engine answered other rows than it took
            return
        current = self.control.answer(ticket, res.obs_seq, res.actions, res.versions)
        if not current.all():
            self.rows_stale += int((~current).sum())
            res = _subset(res, current)
        if not len(res.rows):
            return
        self.rows_answered += len(res.rows)
        self.traj.record_answer(res)
        self.round_tally.rounds.append((res.stats, self.learning.phase != "idle"))

    def unblock(self) -> None:
        """The learner took a batch: the held train rows may go on."""
        if self._held and not self.traj.full:
            for ticket in self._held:
                self.control.release(ticket)
            self._held.clear()
            self.control.schedule_round()

    def _ended_episodes(self, b: Batch, rows: np.ndarray) -> list[tuple[int, int, str]]:
        """(row, batch index, opponent label) of the episodes this batch ends, labelled
        before a new opponent is picked: a self-play lane's second side by its net."""
        return self.book.ended(b, rows, self._label)

    def _label(self, row: int) -> str:
        if not self.row_league[row]:
            return self.row_label[row]
        net = int(self.row_net[row])
        return "self" if net == 0 else f"league:{self.opponents.version[net]}"

    def _pick_opponents(self, b: Batch, rows: np.ndarray) -> None:
        first = (b.flags[: b.n] & layout.FLAG_FIRST) != 0
        for row in rows[first & self.row_league[rows]]:
            self._pick_opponent(int(row))

    def _pick_opponent(self, row: int) -> None:
        old = int(self.row_net[row])
        if old > 0:
            self.opponents.release(old)
        self.row_net[row] = 0
        snap = self.league.sample_opponent()
        if snap is not None:
            net = self.opponents.acquire(snap.version, lambda: self.league.load(snap))
            self.row_net[row] = net or 0
        if self.row_net[row] != 0:
            self.traj.cut(np.array([row]))  # its sequence so far was the current policy's

    def rows_reset(self, rows: slice) -> None:
        """A game (re)started on these rows: cut their sequences, free their opponents."""
        idx = np.arange(rows.start, rows.stop)
        self.traj.cut(idx)
        for row in idx:
            if self.row_league[row] and self.row_net[row] > 0:  # a league opponent's net
                self.opponents.release(int(self.row_net[row]))
                self.row_net[row] = 0
        self.tally.reset(idx)
        if self.engine.running:  # a GRU's state per row; queued on the worker
            self.engine.reset_rows(idx)

    def progress(self) -> str:
        """The console's words on learning: updates, the last update's time, win rates."""
        wins = self.tally.progress()
        upd = self.learning.last_update.get("update_s")
        return f"updates {self.learner.version}" + (f" ({upd:.1f} s)" if upd else "") + (f" | {wins}" if wins else "")

    def win_rates(self) -> dict:
        return self.tally.win_rates()

    def flush_round_stats(self) -> dict | None:
        """The last interval's rounds as one inference.jsonl line (RoundTally), and the
        dashboard's figures to TensorBoard (board.py)."""
        line = self.round_tally.flush(self.learning.phase)
        self.board.sample(line)
        return line

    def learner_failed(self, reason: str, **event) -> None:
        """From the learner thread: the reason the run ends (a `learner_failed` event with
        `event`'s fields), handed to the supervisor's loop."""
        self._fail(reason)
        self._event("error", "learner_failed", **event)
        try:
            self._loop.call_soon_threadsafe(self.control.fail, self.failure)
        except RuntimeError:  # the loop is gone: the run is over anyway
            pass
