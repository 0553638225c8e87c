"""A learning run's TensorBoard curves and evaluation videos (docs/learning.md,
"TensorBoard and videos"), fed by the training answerer (training.py):

    learner thread, each update   -> learner/* (losses, entropy, KL, clip fraction,
                                     staleness, update and wait time, ...)
    loop thread, once a second    -> run/* (agent steps/s, restarts, updates), charts/SPS,
                                     charts/episodic_return and _length (CleanRL's names:
                                     training episodes ended since the last), rounds/*
                                     (the round latency and compute the dashboard plots),
                                     eval/win_rate|decisive_rate|mean_return/<level>
    its own thread, every N min   -> videos/eval-<agent steps>.mp4 and eval/video

Both only enqueue (observe/tensorboard.py's thread writes). Every step is the run's
agent steps, restored from the checkpoint on a resume (the writer's purge step then
drops what a killed run wrote beyond it); a step never repeats within a tag.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from w3async import games
from w3async.observe.tensorboard import TB_DIR, TbWriter
from w3async.observe.video import VideoMaker, newest_file

LEARNER_FIELDS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_frac", "explained_var", "lr",
                  "ent_coef", "grad_norm", "staleness", "staleness_max", "update_s", "wait_s")


@dataclass(frozen=True)
class BoardSources:
    """Where the board reads the run's figures (the training side hands them)."""

    counts: Any  # Counters: agent_steps, every scalar's step (restored on a resume)
    events: Any  # events.jsonl (a JsonLog): video, video_off, video_failed, tensorboard_failed
    restarts: Callable[[], int]  # game restarts so far
    updates: Callable[[], int]  # the learner's version
    episodes: Callable[[], int]  # episodes ended so far
    take_ended: Callable[[], list]  # the episodes ended since the last call (tallies.Ended)
    win_rates: Callable[[], dict]  # per level: rate, decisive, mean_return


class Board:
    """TensorBoard (recipe: status.tensorboard) and videos (evaluation.video_minutes) of
    one run's training side; `close()` at its stop."""

    def __init__(self, recipe, run_dir: Path, src: BoardSources):
        self.src = src
        r = recipe
        counts = src.counts
        self.tb: TbWriter | None = None
        if r.status.tensorboard:
            # what the checkpoint counts (steps up to its agent steps) stays; beyond is a
            # killed run's tail, which TensorBoard's reader drops at this purge step
            purge = counts.agent_steps + 1 if (run_dir / TB_DIR).exists() else None
            self.tb = TbWriter(run_dir, purge_step=purge)
        self._rate = (time.monotonic(), counts.agent_steps)
        # per group of tags, the last step written: this process writes above the checkpoint's
        self._last_step = dict.fromkeys(("learner", "run"), counts.agent_steps)
        self.videos: VideoMaker | None = None
        self._video_off: str | None = None  # the game, when videos are asked for and it has no viewer
        game = games.get(r.game)
        every = 60.0 * r.evaluation.video_minutes
        if every <= 0:
            return
        if game.replay_view is None or not game.replay_dir:
            self._video_off = game.name  # said at start(): run_start stays the run's first event
            return
        folder = run_dir / game.replay_dir
        self.videos = VideoMaker(run_dir, every, lambda: newest_file(folder, tuple(game.replay_suffixes)),
                                 lambda: counts.agent_steps, game=game.name, tb=self.tb, on_video=self._video_made)

    def start(self) -> None:
        if self.videos is not None:
            self.videos.start()
        elif self._video_off:
            self.src.events.info("video_off", game=self._video_off,
                                 reason="the game has no replay viewer: no videos of its evaluation games")

    def _step(self, group: str) -> int:
        """The run's agent steps, made strictly larger than this group's last step."""
        step = max(int(self.src.counts.agent_steps), self._last_step[group] + 1)
        self._last_step[group] = step
        return step

    def update(self, stats: dict) -> None:
        """From the learner thread: one update's figures (learner.jsonl's `update` line)."""
        if self.tb is not None:
            vals = {f"learner/{k}": stats.get(k) for k in LEARNER_FIELDS}
            vals["learner/updates"] = stats.get("update")
            self.tb.scalars(self._step("learner"), vals)

    def sample(self, rounds: dict | None) -> None:
        """From the loop thread, once a second: the dashboard's figures; `rounds` is the
        inference.jsonl line just written (None when no round came back)."""
        if self.tb is None:
            return
        h = self.src
        now, steps = time.monotonic(), h.counts.agent_steps
        t0, s0 = self._rate
        if steps == s0:
            return  # no step since the last sample: nothing new to plot at a new step
        self._rate = (now, steps)
        vals = {"run/steps_per_s": (steps - s0) / max(now - t0, 1e-6), "run/restarts": h.restarts(),
                "run/updates": h.updates(), "run/episodes": h.episodes()}
        if rounds:
            vals.update({"rounds/latency_ms_mean": rounds.get("latency_ms_mean"),
                         "rounds/latency_ms_p95": rounds.get("latency_ms_p95"),
                         "rounds/latency_ms_max": rounds.get("latency_ms_max"),
                         "rounds/compute_ms_mean": rounds.get("compute_ms_mean"),
                         "rounds/rows_per_round": rounds.get("rows_per_round")})
        vals["charts/SPS"] = vals["run/steps_per_s"]  # the names CleanRL's scripts write
        ended = h.take_ended()
        if ended:
            vals["run/discarded_per_episode"] = sum(e.discarded for e in ended) / len(ended)
        train = [e for e in ended if not e.is_eval]
        if train:  # training episodes only, as CleanRL logs its rollouts' episodes
            vals["charts/episodic_return"] = sum(e.ret for e in train) / len(train)
            vals["charts/episodic_length"] = sum(e.steps for e in train) / len(train)
        for level, w in h.win_rates().items():
            vals[f"eval/win_rate/{level}"] = w.get("rate")
            vals[f"eval/decisive_rate/{level}"] = w.get("decisive")
            vals[f"eval/mean_return/{level}"] = w.get("mean_return")
        self.tb.scalars(self._step("run"), vals)

    def _video_made(self, path, replay, info: dict) -> None:
        self.src.events.info("video", path=str(path), replay=str(replay), **info)

    def close(self) -> None:
        """Stop the video thread, write what is queued, flush and close the event file."""
        if self.videos is not None:
            self.videos.stop()
            for err in self.videos.errors:
                self.src.events.warning("video_failed", error=err)
        if self.tb is not None:
            self.tb.close()
            if self.tb.error:
                self.src.events.warning("tensorboard_failed", error=self.tb.error)
