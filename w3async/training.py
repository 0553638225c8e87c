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
answer never lands on the new game's rows (gather.answer checks the sequence).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from . import layout
from .checkpoint import load_latest, save_checkpoint
from .gather import Batch
from .inference import InferenceEngine
from .league import League, OpponentSlots
from .learner import Learner
from .logs import JsonLog
from .network import Network
from .recipes import recipe_to_dict
from .trajectories import Trajectories

TRAIN, EVAL = 0, 1


def opponent_of(env: dict) -> str:
    """The label of a group's second side from the duel's W3D_SIDES ("agent,ai:easy" ->
    "ai:easy"); "self" for two agent sides or a game without sides."""
    sides = [x.strip() for x in env.get("W3D_SIDES", "agent,agent").split(",")]
    return sides[1] if len(sides) > 1 and sides[1] != "agent" else "self"


class Training:
    """Owns the engine, the trajectories, the learner and its thread, the league, the
    evaluation tallies and the checkpoints of one run. start()/stop() by the supervisor."""

    def __init__(self, sup):
        r = sup.recipe
        self.sup, self.recipe, self.run_dir = sup, r, Path(sup.run_dir)
        n_rows = sup.table.n_rows
        self.engine = InferenceEngine(sup.spec, r.network, device=r.inference.device, n_slots=r.inference.n_slots,
                                      max_rows=n_rows, n_table_rows=n_rows, num_threads=r.inference.num_threads,
                                      seed=r.inference.seed)
        self.traj = Trajectories(n_rows, r.trajectories, state_dim=r.network.d_model if r.network.gru else None)
        torch.manual_seed(r.inference.seed)
        self.learner = Learner(Network(sup.spec, r.network), r.learner, device=r.inference.device, pause=self._pause)
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
        for s in sup.slots:
            rows = np.arange(s.row0, s.row0 + s.nrows)
            self.row_role[rows] = EVAL if s.group.role == "eval" else TRAIN
            self.row_game[rows] = s.index
            label = opponent_of(s.group.env)
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
        self._obs_col, self._act_col = sup.table.column("obs_seq"), sup.table.column("act_seq")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.episodes_log = JsonLog(self.run_dir / "episodes.jsonl")
        self.learner_log = JsonLog(self.run_dir / "learner.jsonl")
        self.inference_log = JsonLog(self.run_dir / "inference.jsonl")

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._resume()
        self.engine.start()
        self.engine.publish(self.learner.net.state_dict(), self.learner.version)
        self._thread = threading.Thread(target=self._learn, name="w3s-learner", daemon=True)
        self._thread.start()

    def _resume(self) -> None:
        ckpt = load_latest(self.run_dir)
        if ckpt is None:
            return
        self.learner.load_state_dict(ckpt["learner"])
        self.league.load_state_dict(ckpt["league"])
        c = ckpt["counters"]
        self.sup.agent_steps = int(c.get("agent_steps", 0))
        self.episodes = int(c.get("episodes", 0))
        self.updates_done = self.learner.version
        for level, counts in c.get("eval_totals", {}).items():
            self.eval_totals[level].update(counts)
        self.last_checkpoint = ckpt["path"]
        self.sup.events.info("resume", checkpoint=ckpt["path"], updates=self.learner.version,
                             agent_steps=self.sup.agent_steps, snapshots=len(self.league.snapshots))

    def stop(self) -> None:
        """Stop the learner thread (its update finishes), write a last checkpoint, end the
        worker. Called by the supervisor after the games are ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.engine.stop()
        try:
            self.checkpoint()
        finally:
            for log in (self.episodes_log, self.learner_log, self.inference_log):
                log.close()

    def counters(self) -> dict:
        return dict(agent_steps=self.sup.agent_steps, episodes=self.episodes, updates=self.learner.version,
                    eval_totals={k: dict(v) for k, v in self.eval_totals.items()})

    def checkpoint(self) -> Path:
        path = save_checkpoint(self.run_dir, learner=self.learner.state_dict(), counters=self.counters(),
                               league=self.league.state_dict(), recipe=recipe_to_dict(self.recipe),
                               keep=self.recipe.checkpoint.keep)
        self.last_checkpoint = str(path)
        summary = {k: dict(v) for k, v in self.eval_since_ckpt.items()}
        self.episodes_log.info("evaluation", updates=self.learner.version, checkpoint=str(path),
                               since_last=summary, win_rate=self.win_rates())
        self.eval_since_ckpt.clear()
        return path

    # ---- rounds (the loop thread) -----------------------------------------------------

    def round(self, b: Batch) -> None:
        """Answer a gathered batch through the networks (asynchronously)."""
        n = b.n
        rows = b.rows[:n].astype(np.int64)
        # Rows waiting anywhere (gathered now, held in flight or by back-pressure): the
        # share a round answers of them says how well rounds batch (inference.jsonl).
        self._waiting.append((n, int(np.count_nonzero(self._obs_col != self._act_col))))
        if self.traj.full:
            # Back-pressure: the train groups' rows wait, unanswered and unseen, until the
            # learner takes a batch (unblock); evaluation rows go on.
            waiting = self.row_role[rows] == TRAIN
            if waiting.any():
                self.sup.gatherer.hold(rows[waiting])
                self._held.append(rows[waiting])
                b.select(~waiting)
                n = b.n
                rows = b.rows[:n].astype(np.int64)
        if not n:
            return
        self._episodes(b, rows)
        train = (self.row_role[rows] == TRAIN) & (self.row_slot[rows] == 0)
        self.traj.record_obs(b, train)
        fut = self.engine.submit(b, self.row_slot[rows])
        self.sup.gatherer.hold(rows)
        self._inflight += 1
        loop = self._loop
        fut.add_done_callback(lambda f: loop.call_soon_threadsafe(self._answered, f))

    def _answered(self, fut) -> None:
        self._inflight -= 1
        try:
            res = fut.result()
        except Exception as e:  # noqa: BLE001 (a failed round stops the run with its cause)
            self.sup._finish(f"inference round failed: {e!r}")
            return
        if not (np.isfinite(res.value).all() and np.isfinite(res.logp).all()):
            self.nonfinite_outputs += 1  # the checks keep NaN out of the inputs; count, never answer it
            self.sup.events.error("nonfinite_output", rows=res.rows[:8].tolist())
        g = self.sup.gatherer
        g.release(res.rows)
        if not self.sup._stopping:
            g.answer(res.rows, res.obs_seq, res.actions, res.versions)
        self.traj.record_answer(res)
        self.sup.agent_steps += len(res.rows)
        self.sup.rounds += 1
        self._round_stats.append((res.stats, self.learner_phase != "idle"))
        self.sup.check_stop_steps()

    def unblock(self) -> None:
        """The learner took a batch: the held train rows may go on."""
        if self._held and not self.traj.full:
            for rows in self._held:
                self.sup.gatherer.release(rows)
            self._held.clear()
            self.sup.schedule_round()

    def _episodes(self, b: Batch, rows: np.ndarray) -> None:
        """Returns, finished episodes (logged), and the opponent of each new episode."""
        n = b.n
        flags = b.flags[:n]
        first = (flags & layout.FLAG_FIRST) != 0
        end = (flags & (layout.FLAG_DONE | layout.FLAG_TRUNCATED)) != 0
        self.row_return[rows[first]] = 0.0
        self.row_return[rows] += b.reward[:n]
        for k in np.flatnonzero(end):
            row = int(rows[k])
            self._log_episode(row, b, int(k))
        for row in rows[first & self.row_league[rows]]:
            self._pick_opponent(int(row))

    def _log_episode(self, row: int, b: Batch, k: int) -> None:
        r = float(b.reward[k])
        result = "win" if r > 0 else "loss" if r < 0 else "draw"
        if b.flags[k] & layout.FLAG_TRUNCATED and not b.flags[k] & layout.FLAG_DONE:
            result = "truncated"
        role = self.row_role[row]
        slot = int(self.row_slot[row])
        label = self.row_label[row]
        if self.row_league[row]:
            label = "self" if slot == 0 else f"league:{self.opponents.version[slot]}"
        self.episodes += 1
        replay = None
        self.episodes_log.info("episode", slot=int(self.row_game[row]), row=row, lane=int(b.lane[k]),
                               side=int(b.side[k]), opponent=label, eval=bool(role == EVAL), result=result,
                               steps=int(b.step[k]), **{"return": round(float(self.row_return[row]), 4)},
                               policy_version=int(self.learner.version), replay=replay)
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

    def on_rows_reset(self, rows: slice) -> None:
        """A game (re)started on these rows: cut their sequences, free their opponents."""
        idx = np.arange(rows.start, rows.stop)
        self.traj.cut(idx)
        for row in idx:
            if self.row_slot[row] > 0:
                self.opponents.release(int(self.row_slot[row]))
                self.row_slot[row] = 0
        self.row_return[idx] = 0.0
        if self.engine.running:  # a GRU's state per row; queued on the worker
            self.engine.reset_rows(idx)

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
                    self.sup.events.error("nonfinite_batch", batch=self.traj.stats.batches)
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
                    loop.call_soon_threadsafe(self.sup.request_stop)
                    return
        except Exception as e:  # noqa: BLE001 (the run stops cleanly with the cause)
            self.learner_phase = "failed"
            tb_text = traceback.format_exc(limit=4)
            self.sup.events.error("learner_failed", error=repr(e), traceback=tb_text)
            loop.call_soon_threadsafe(self.sup._finish, f"learner failed: {e!r}")
