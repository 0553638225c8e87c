"""What the training answerer counts as rounds come back: the episodes and the rounds.

`EpisodeTally`: each row's return so far; the finished episodes, one episodes.jsonl line
each, labelled by the opponent they were played against; the evaluation results per
opponent label (a window for the win rates, the run's totals that checkpoints keep, and
those since the last checkpoint, which its `evaluation` line reports).

`RoundTally`: the rounds answered in the last interval (once a second) and the rows
waiting when each was gathered, as one inference.jsonl `rounds` line (docs/logs.md).
"""

from __future__ import annotations

import collections
import functools
from typing import Callable, NamedTuple

import numpy as np

from w3async import games, outcomes
from w3async.observe.logs import JsonLog
from w3async.sync import layout
from w3async.sync.gather import Batch

TRAIN, EVAL = 0, 1  # a row's role: its group's


class Ended(NamedTuple):
    """An ended episode as TensorBoard's per-second figures read it (board.py)."""

    discarded: int  # orders its game discarded
    ret: float
    steps: int
    is_eval: bool


def episode_result(b: Batch, k: int, read) -> str:
    """Batch row k's ended episode: "truncated" when it was cut, else read(its last
    reward), the game's Game.result_of with its group's environment."""
    if b.flags[k] & layout.FLAG_TRUNCATED and not b.flags[k] & layout.FLAG_DONE:
        return "truncated"
    return read(float(b.reward[k]))


class EpisodeTally:
    """Episodes and evaluation results of one run. `log` (episodes.jsonl) is attached
    once a resume has cut the log (it is not open when a checkpoint's counters load)."""

    def __init__(self, n_rows: int, eval_window: int):
        self.count = 0  # episodes finished in the run (a checkpoint keeps it)
        self.row_return = np.zeros(n_rows, np.float64)
        self.row_discarded = np.zeros(n_rows, np.int64)  # orders the game discarded this episode (shim's `discarded`)
        # each episode ended since board.py last took them (TensorBoard's
        # run/discarded_per_episode and charts/episodic_*)
        self.ended_since: list[Ended] = []
        self.window: dict[str, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=eval_window))
        self.totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.since_checkpoint: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        # every ended evaluation episode's return, truncated ones too (a game scored by points)
        self.returns: dict[str, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=eval_window))
        self.log: JsonLog | None = None

    def add_rewards(self, b: Batch, rows: np.ndarray) -> None:
        """A round the engine took: returns restart at an episode's first step."""
        n = b.n
        first = (b.flags[:n] & layout.FLAG_FIRST) != 0
        self.row_return[rows[first]] = 0.0
        self.row_return[rows] += b.reward[:n]
        self.row_discarded[rows[first]] = 0
        self.row_discarded[rows] += b.discarded[:n]

    def outcomes(self, b: Batch, ended: list[tuple[int, int, int]], result_of: dict) -> list[str]:
        """The result of each ended episode (row, batch index k, game) of this batch, read
        by result_of[game] (episode_result). Two sides of one game's lane that both lost
        drew: a draw scored as a loss for each side (the duel's W3D_DRAW_REWARD = -1)
        reads as two losses by reward alone, and no game is lost by both its sides. Both
        sides' rows end in one batch, as a game posts its lane's rows together."""
        out, side_of = [], {}
        for i, (row, k, game) in enumerate(ended):
            out.append(episode_result(b, k, result_of[game]))
            j = side_of.get((game, int(b.lane[k])))
            if j is not None and out[j] == out[i] == "loss" and int(b.side[ended[j][1]]) != int(b.side[k]):
                out[i] = out[j] = "draw"
            side_of[(game, int(b.lane[k]))] = i
        return out

    def finish(self, row: int, b: Batch, k: int, label: str, game: int, is_eval: bool, version: int,
               result: str) -> None:
        """Row `row` (batch index k) ended an episode against `label` with `result`
        (outcomes()) and its end (decisive, or at the game's time limit: w3async/outcomes.py):
        its line, and for an evaluation row its outcome in the tallies."""
        self.count += 1
        end = outcomes.end_of(int(b.flags[k]))
        self.log.info("episode", slot=game, row=row, lane=int(b.lane[k]), side=int(b.side[k]), opponent=label,
                      eval=is_eval, result=result, end=end, steps=int(b.step[k]),
                      **{"return": round(float(self.row_return[row]), 4)}, policy_version=version,
                      discarded=int(self.row_discarded[row]))
        self.ended_since.append(Ended(int(self.row_discarded[row]), float(self.row_return[row]), int(b.step[k]),
                                      is_eval))
        if is_eval:
            self.returns[label].append(float(self.row_return[row]))
            kind = outcomes.outcome(result, end)
            self.window[label].append(kind)  # best.py's rule reads the outcomes
            self.totals[label][kind] += 1
            self.since_checkpoint[label][kind] += 1

    def take_ended(self) -> list[Ended]:
        """The episodes ended since the last call (board.py's, once a second on the loop)."""
        ended, self.ended_since = self.ended_since, []
        return ended

    def reset(self, rows: np.ndarray) -> None:
        self.row_return[rows] = 0.0
        self.row_discarded[rows] = 0

    def win_rates(self) -> dict:
        """{label: win rate and decisive rate over the window (outcomes.py's definition),
        its games, the run's totals by kind, the mean return of its last window of ended
        episodes} of each evaluation opponent."""
        out = {}
        for k in sorted(set(self.window) | set(self.returns)):
            t = outcomes.tally(self.window.get(k, ()))
            out[k] = dict(rate=t["win_rate"], decisive=t["decisive_rate"], n=t["games"], totals=dict(self.totals[k]),
                          mean_return=outcomes.mean_return(self.returns.get(k, ())))
        return out

    def progress(self) -> str:
        """The console's words on the evaluation: each opponent's win rate over its games,
        and the decisive share: "ai:easy 85%/50 (40% decisive)"."""
        return " ".join(f"{k} {v['rate']:.0%}/{v['n']} ({v['decisive']:.0%} decisive)"
                        for k, v in self.win_rates().items() if v["rate"] is not None)

    def evaluation_line(self, version: int, checkpoint: str, score: float | None = None) -> None:
        """The checkpoint's `evaluation` line: the results since the last one, the win
        rates, and best.py's score of the windows (None until every level has a full one)."""
        summary = {k: dict(v) for k, v in self.since_checkpoint.items()}
        self.log.info("evaluation", updates=version, checkpoint=checkpoint, since_last=summary,
                      win_rate=self.win_rates(), score=score)
        self.since_checkpoint.clear()


class EpisodeBook:
    """Whose each table row is: its game slot, its role (TRAIN, EVAL) and the label of the
    opponent it plays (the game labels its opponents from its group's environment), and
    each slot's reading of an outcome; with its EpisodeTally, what a batch ended. One book
    for every policy: a learner's run and a fixed policy's (the random baseline) write the
    same episodes.jsonl."""

    def __init__(self, recipe, slots, n_rows: int):
        game = games.get(recipe.game)
        self.role = np.zeros(n_rows, np.int8)
        self.game = np.full(n_rows, -1, np.int32)
        self.label: list[str] = ["self"] * n_rows
        for s in slots:
            rows = np.arange(s.row0, s.row0 + s.nrows)
            self.role[rows] = EVAL if s.group.role == "eval" else TRAIN
            self.game[rows] = s.index
            self.label[s.row0:s.row0 + s.nrows] = [game.opponent_of(s.group.env)] * s.nrows
        # each slot's reading of an episode's outcome (its group's env: the duel's W3D_DRAW_REWARD)
        self.result = {s.index: functools.partial(game.result_of, env=s.group.env) for s in slots}
        eval_labels = {self.label[s.row0] for s in slots if s.group.role == "eval"}
        self.levels = [lv for lv in game.eval_levels if lv in eval_labels] + sorted(eval_labels - set(game.eval_levels))
        self.tally = EpisodeTally(n_rows, recipe.evaluation.window)

    def ended(self, b: Batch, rows: np.ndarray, label: Callable[[int], str] | None = None) -> list[tuple[int, int, str]]:
        """(row, batch index, opponent label) of the episodes this batch ends; label(row)
        where the opponent is not the group's (a league's snapshot), read before a new
        one is picked."""
        end = (b.flags[: b.n] & (layout.FLAG_DONE | layout.FLAG_TRUNCATED)) != 0
        return [(int(rows[k]), int(k), label(int(rows[k])) if label else self.label[int(rows[k])])
                for k in np.flatnonzero(end)]

    def record(self, b: Batch, rows: np.ndarray, ended: list[tuple[int, int, str]], version: int) -> None:
        """A round taken: its rewards into the returns, then each ended episode's line and,
        for an evaluation row, its result in the tallies."""
        self.tally.add_rewards(b, rows)
        slots = [int(self.game[row]) for row, _, _ in ended]
        results = self.tally.outcomes(b, [(row, k, g) for (row, k, _), g in zip(ended, slots)], self.result)
        for (row, k, label), slot, result in zip(ended, slots, results):
            self.tally.finish(row, b, k, label, slot, bool(self.role[row] == EVAL), version, result)


class RoundTally:
    """The answered rounds of the last interval, flushed once a second into one line."""

    def __init__(self):
        self.rounds: list = []  # (RoundStats, the learner was updating when it came back)
        self.waiting: list[tuple[int, int]] = []  # per round: (rows gathered, rows waiting in all)
        self.log: JsonLog | None = None  # inference.jsonl

    def flush(self, learner_phase: str) -> dict | None:
        """The interval's rounds as one inference.jsonl line (None when there were none)."""
        both, self.rounds = self.rounds, []
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
                    buckets=dict(buckets), learner_phase=learner_phase,
                    latency_ms_idle=round(float(lat[~during].mean()), 3) if (~during).any() else None,
                    latency_ms_update=round(float(lat[during].mean()), 3) if during.any() else None,
                    rounds_update=int(during.sum()))
        waits, self.waiting = self.waiting, []
        if waits:
            g = np.array(waits, float)
            line["waiting_mean"] = round(float(g[:, 1].mean()), 2)
            line["gathered_per_waiting"] = round(float(g[:, 0].sum() / max(g[:, 1].sum(), 1)), 3)
        self.log.info("rounds", **line)
        return line
