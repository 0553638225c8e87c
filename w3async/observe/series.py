"""A run's series over time, kept between requests so that a refresh costs the same at
100 and at 100,000 episodes.

The original system's run page re-read and re-binned every episode on each refresh
(4.5 s at 135k episodes). Here every record is handled once, when it arrives:
`RunSeries` keeps the dashboard's series (steps/s, round latency, update time and wait,
restarts, win rate against each evaluation level) in fixed-size time bins (bins.py) and
the running totals that /status reports. It is fed live (the status server's sampler)
or from the run's files (run_files.py: the tailing reader, docs/logs.md's schema).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

import numpy as np

from w3async import games, outcomes
from w3async.observe.accounting import KINDS as ACCOUNTED
from w3async.observe.bins import Bins, Columns, floats

RESULTS = {"win": 1, "draw": 0, "loss": -1}
NO_RESULT = -2  # "truncated" (or anything else): counted as an episode, not in win rates
RECENT = 100  # episodes in a "recent" win rate, per level


@dataclass
class LevelTally:
    """Evaluation outcomes against one opponent (all time and the last RECENT), counted
    and rated as w3async/outcomes.py defines."""

    counts: collections.Counter = field(default_factory=collections.Counter)  # outcomes.KINDS -> games
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RECENT))
    # Returns of every ended episode, truncated ones too: a game scored by points and not
    # by wins (Snake: its score - 1) is read here.
    return_sum: float = 0.0
    n_returns: int = 0
    recent_returns: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RECENT))

    @property
    def games(self) -> int:
        return sum(self.counts.values())

    def add_many(self, results: np.ndarray, time_limit: np.ndarray) -> None:
        """Results: 1 win, 0 draw, -1 loss; time_limit: the game's time limit ended it.
        Counted in numpy: a run's whole history reads in one pass."""
        tl = time_limit.astype(np.int64)  # KINDS: win, win:time_limit, draw, loss:time_limit, loss
        code = np.where(results == 0, 2, np.where(results == 1, tl, 4 - tl))
        counts = np.bincount(code, minlength=len(outcomes.KINDS))
        self.counts.update({k: int(c) for k, c in zip(outcomes.KINDS, counts) if c})
        self.recent.extend(outcomes.KINDS[c] for c in code[-RECENT:].tolist())

    def add_returns(self, rets: np.ndarray) -> None:
        """Ended episodes' returns (with a result or truncated; NaN, a line without one, skipped)."""
        rets = rets[np.isfinite(rets)]
        self.return_sum += float(rets.sum())
        self.n_returns += len(rets)
        self.recent_returns.extend(rets[-RECENT:].tolist())

    def as_dict(self) -> dict:
        t = outcomes.tally_counts(self.counts)
        r = outcomes.tally(self.recent)
        return dict({k: t[k] for k in ("games", "wins", "decisive_wins", "time_limit_wins", "draws", "losses",
                                       "time_limit_losses", "win_rate", "decisive_rate")},
                    recent_games=r["games"], recent_win_rate=r["win_rate"], recent_decisive_rate=r["decisive_rate"],
                    episodes=self.n_returns,  # ended, with a result or not
                    mean_return=round(self.return_sum / self.n_returns, 4) if self.n_returns else None,
                    recent_mean_return=outcomes.mean_return(self.recent_returns))



SAMPLE_FIELDS = ("steps_per_s", "latency_ms", "latency_p95_ms", "latency_max_ms", "compute_ms", "update_s", "wait_s",
                 "restarts") + tuple(f"{fig}:{k}" for fig in ("cpu", "rss_mb") for k in ACCOUNTED)


def episode_fields(levels: tuple[str, ...]) -> tuple[str, ...]:
    return (tuple(f"{p}:{lvl}" for lvl in levels for p in ("score", "decisive", "n"))
            + ("score:train", "n:train", "discarded"))


# The dashboard's plots: name -> list of (label, bins, field, aggregation); "trailing":
# see bins.TRAILING_N.
WIN_RATE = "win_rate"  # per evaluation level, in the levels' order: its win rate, then its decisive rate
PLOTS = {
    "steps_per_s": [("agent steps/s", "samples", "steps_per_s", "mean")],
    WIN_RATE: [],
    "latency_ms": [("round latency mean", "samples", "latency_ms", "mean"),
                   ("round latency p95", "samples", "latency_p95_ms", "mean"),
                   ("round latency max", "samples", "latency_max_ms", "max"),
                   ("compute", "samples", "compute_ms", "mean")],
    "update_s": [("update", "samples", "update_s", "mean"), ("wait for data", "samples", "wait_s", "mean")],
    "restarts": [("restarts (total)", "samples", "restarts", "max")],
    "cores": [(k, "samples", f"cpu:{k}", "mean") for k in ACCOUNTED],
    "memory_mb": [(k, "samples", f"rss_mb:{k}", "mean") for k in ACCOUNTED],
    "discarded": [("discarded orders per episode", "episodes", "discarded", "mean")],
}


class RunSeries:
    """The run's series and running totals. Times are unix seconds; `t0` is the run's
    start (the first time seen, or run_start's when known). `levels`: the evaluation
    opponents' labels, in the plots' order (default: every registered game's, from
    the games registry)."""

    def __init__(self, max_bins: int = 240, levels: tuple[str, ...] | None = None):
        self.eval_levels: tuple[str, ...] = games.eval_levels() if levels is None else tuple(levels)
        self._level = {lvl: i for i, lvl in enumerate(self.eval_levels)}
        self.t0: float | None = None
        self.samples = Bins(SAMPLE_FIELDS, max_bins)
        self.episode_bins = Bins(episode_fields(self.eval_levels), max_bins)
        self.episodes = Columns(dict(t="f8", level="i1", result="i1", time_limit="?", steps="i4", ret="f4",
                                     version="i4"))
        self.levels: dict[str, LevelTally] = {}
        self.train = LevelTally()
        self.opponents: collections.Counter = collections.Counter()
        self.last_episode: dict | None = None
        self.last_round: dict | None = None  # inference.jsonl's last line
        self.last_update: dict | None = None  # learner.jsonl's last update
        self.updates = 0

    def _t(self, t: float) -> float:
        """Note the earliest time; every Bins counts from the run's start, so batches
        and single records land in the same bins."""
        if self.t0 is None:
            self.t0 = t
        for b in (self.samples, self.episode_bins):
            if b.origin is None:
                b.origin = self.t0
        return t

    def add_sample(self, t: float, **values: float) -> None:
        """Per-second figures (SAMPLE_FIELDS; any subset)."""
        self.samples.add(self._t(t), **values)

    def add_round_line(self, t: float, rec: dict) -> None:
        """One inference.jsonl line (one second of rounds)."""
        self.add_round_lines(np.array([t]), [rec])

    def add_round_lines(self, t: np.ndarray, recs: list[dict]) -> None:
        """inference.jsonl lines (docs/logs.md's names, the only ones read), one a second."""
        self._t(float(np.min(t)))
        self.last_round = recs[-1]
        self.samples.add_many(t, latency_ms=floats(recs, "latency_ms_mean"), latency_p95_ms=floats(recs, "latency_ms_p95"),
                              latency_max_ms=floats(recs, "latency_ms_max"), compute_ms=floats(recs, "compute_ms_mean"))

    def add_update(self, t: float, rec: dict) -> None:
        """One learner.jsonl update line."""
        self.add_updates(np.array([t]), [rec])

    def add_updates(self, t: np.ndarray, recs: list[dict]) -> None:
        self._t(float(np.min(t)))
        self.updates += len(recs)
        self.last_update = recs[-1]
        self.samples.add_many(t, update_s=floats(recs, "update_s"), wait_s=floats(recs, "wait_s"))

    def add_episode(self, t: float, opponent: str, eval: bool, result: str, steps: int = 0, ret: float = 0.0,
                    version: int = 0, discarded: float = float("nan"), end: str = "decisive") -> None:
        """One finished episode (episodes.jsonl's fields)."""
        self.add_episodes(np.array([t]), [opponent], [eval], [result], [steps], [ret], [version], [discarded], [end])

    def add_episodes(self, t: np.ndarray, opponents: list[str], evals: list[bool], results: list[str],
                     steps: list[int], rets: list[float], versions: list[int], discarded=None,
                     ends: list[str] | None = None) -> None:
        """Finished episodes, as equal-length lists (episodes.jsonl's fields): one numpy
        pass per batch, so a run's whole history reads as fast as its files parse.
        `discarded`: the orders each episode's game discarded (NaN: not recorded);
        `ends`: how each ended (outcomes.py: "decisive", "time_limit"; None: decisive, as
        logs before the split say nothing)."""
        n = len(t)
        if not n:
            return
        t = np.asarray(t, dtype=np.float64)
        self._t(float(t.min()))
        r = np.array([RESULTS.get(x, NO_RESULT) for x in results], dtype=np.int8)
        tl = np.array([e == "time_limit" for e in ends] if ends is not None else np.zeros(n, bool), dtype=bool)
        level = np.array([self._level.get(o, -1) for o in opponents], dtype=np.int8)
        ev = np.array(evals, dtype=bool)
        self.episodes.extend(t=t, level=level, result=r, time_limit=tl, steps=steps, ret=rets, version=versions)
        self.opponents.update(opponents)
        score = (r == 1).astype(np.float64)  # the win rate's (outcomes.py): a draw is not a win
        decisive = ((r == 1) & ~tl).astype(np.float64)
        decided = r != NO_RESULT  # a "truncated" episode has no result: not in the win rates
        rets = np.asarray(rets, dtype=np.float64)
        for k, lvl in enumerate(self.eval_levels):
            ended = ev & (level == k)
            if ended.any():
                self.levels.setdefault(lvl, LevelTally()).add_returns(rets[ended])
            m = ended & decided
            if m.any():
                self.levels[lvl].add_many(r[m], tl[m])
                self.episode_bins.add_many(t[m], **{f"score:{lvl}": score[m], f"decisive:{lvl}": decisive[m],
                                                    f"n:{lvl}": np.ones(int(m.sum()))})
        if discarded is not None:  # bins pass NaN over
            self.episode_bins.add_many(t, discarded=np.asarray(discarded, np.float64))
        if (~ev).any():
            self.train.add_returns(rets[~ev])
        m = ~ev & decided
        if m.any():
            self.train.add_many(r[m], tl[m])
            self.episode_bins.add_many(t[m], **{"score:train": score[m], "n:train": np.ones(int(m.sum()))})
        self.last_episode = dict(t=float(t[-1]), opponent=opponents[-1], eval=bool(ev[-1]), result=results[-1])

    def plots(self) -> dict:
        """{plot: [{label, t: [s since start], y: [...]}]}: O(max_bins) per line."""
        t0 = self.t0 or 0.0
        out = {}
        for name, lines in PLOTS.items():
            if name == WIN_RATE:
                lines = [(f"{lvl}{tag}", "episodes", f"{fld}:{lvl}", "trailing") for lvl in self.eval_levels
                         for tag, fld in (("", "score"), (" decisive", "decisive"))]
            out[name] = []
            for label, which, fld, agg in lines:
                bins = self.samples if which == "samples" else self.episode_bins
                t, y = bins.points(fld, agg)
                out[name].append(dict(label=label, t=np.round(t - t0, 2).tolist(), y=np.round(y, 4).tolist()))
        return out

    def evaluation(self) -> dict:
        return {lvl: self.levels[lvl].as_dict() for lvl in self.eval_levels if lvl in self.levels}
