"""A run's series over time, kept between requests so that a refresh costs the same at
100 and at 100,000 episodes.

The original system's run page re-read and re-binned every episode on each refresh
(4.5 s at 135k episodes). Here every record is handled once, when it arrives:

- `Columns`: named numpy columns, grown by doubling, extended with new records only
  (the raw history: the CLI and the tests read it; nothing on a refresh scans it).
- `Bins`: a fixed budget of time bins (sum, count and max per field) updated on append;
  when time runs past the last bin, neighbours merge and the width doubles. A plot
  reads at most `max_bins` points, whatever the run's length.
- `RunSeries`: the dashboard's series (steps/s, round latency, update time and wait,
  restarts, win rate against each evaluation level) and the running totals that
  /status reports, fed live (the status server's sampler) or from the run's files.
- `RunFiles`: tails the run folder's JSON-lines files (docs/logs.md) from where it
  last stopped, whole lines only, and feeds a RunSeries; the same code serves a live
  run and a finished one (`python -m w3async status`).

Why one module of ~510 lines: the series kept between requests and the tailing reader
that feeds them change together (one schema, docs/logs.md); split them when a second
reader appears.
"""

from __future__ import annotations

import collections
import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from w3async import games

RESULTS = {"win": 1, "draw": 0, "loss": -1}
NO_RESULT = -2  # "truncated" (or anything else): counted as an episode, not in win rates
RECENT = 100  # episodes in a "recent" win rate, per level


class Columns:
    """Named numpy columns of one length, grown by doubling (amortised O(1) append)."""

    def __init__(self, dtypes: dict[str, str], capacity: int = 1024):
        self.n = 0
        self._cols = {k: np.zeros(capacity, dtype=v) for k, v in dtypes.items()}

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name][: self.n]

    def _reserve(self, extra: int) -> None:
        cap = len(next(iter(self._cols.values())))
        if self.n + extra <= cap:
            return
        while cap < self.n + extra:
            cap *= 2
        for k, a in self._cols.items():
            b = np.zeros(cap, dtype=a.dtype)
            b[: self.n] = a[: self.n]
            self._cols[k] = b

    def extend(self, **arrays) -> None:
        """Records as equal-length arrays, one per column (a column not named gets 0,
        NaN for floats)."""
        n = len(next(iter(arrays.values())))
        self._reserve(n)
        for k, a in self._cols.items():
            a[self.n: self.n + n] = arrays[k] if k in arrays else (np.nan if a.dtype.kind == "f" else 0)
        self.n += n


class Bins:
    """Per-field sum, count and max over fixed-width time bins, at most `max_bins` of
    them: when a time falls past the last bin, the bins merge k-to-1 and the width
    grows k times (k a power of two). Adding is O(fields); reading O(max_bins)."""

    def __init__(self, fields: tuple[str, ...], max_bins: int = 240, width_s: float = 1.0):
        self.fields = fields
        self.max_bins = max_bins
        self.width_s = width_s
        self.origin: float | None = None
        self.sum = np.zeros((len(fields), max_bins))
        self.cnt = np.zeros((len(fields), max_bins), dtype=np.int64)
        self.max = np.full((len(fields), max_bins), -np.inf)
        self._index = {f: i for i, f in enumerate(fields)}
        self.used = 0  # bins up to the latest one with data

    def _bin(self, t: float) -> int:
        if self.origin is None:
            self.origin = t
        b = int(max(t - self.origin, 0.0) // self.width_s)
        if b >= self.max_bins:
            k = 1
            while b // k >= self.max_bins:
                k *= 2
            self._merge(k)
            b //= k
        return b

    def _merge(self, k: int) -> None:
        """Bins k-to-1: sums and counts add, maxima take the max."""
        nb = self.max_bins
        pad = (-nb) % k
        def fold(a, fill, op):
            a = np.concatenate([a, np.full((a.shape[0], pad), fill, dtype=a.dtype)], axis=1)
            r = op(a.reshape(a.shape[0], -1, k), axis=2)
            out = np.full_like(a[:, :nb], fill)
            out[:, : r.shape[1]] = r
            return out
        self.sum = fold(self.sum, 0.0, np.sum)
        self.cnt = fold(self.cnt, 0, np.sum)
        self.max = fold(self.max, -np.inf, np.max)
        self.width_s *= k
        self.used = (self.used + k - 1) // k

    def add(self, t: float, **values: float) -> None:
        """Values at time t; a NaN or None value is not counted."""
        b = self._bin(t)
        for name, v in values.items():
            if v is None or v != v:  # None or NaN
                continue
            i = self._index[name]
            self.sum[i, b] += v
            self.cnt[i, b] += 1
            if v > self.max[i, b]:
                self.max[i, b] = v
        self.used = max(self.used, b + 1)

    def add_many(self, t: np.ndarray, **values: np.ndarray) -> None:
        """Many records at once (values: arrays as long as t; NaN is not counted)."""
        t = np.asarray(t, dtype=np.float64)
        if not len(t):
            return
        if self.origin is None:
            self.origin = float(t.min())
        self._bin(float(t.max()))  # merges first when the batch runs past the last bin
        idx = np.clip((t - self.origin) // self.width_s, 0, self.max_bins - 1).astype(np.intp)
        for name, v in values.items():
            v = np.asarray(v, dtype=np.float64)
            ok = ~np.isnan(v)
            i, b, v = self._index[name], idx[ok], v[ok]
            np.add.at(self.sum[i], b, v)
            np.add.at(self.cnt[i], b, 1)
            np.maximum.at(self.max[i], b, v)
        self.used = max(self.used, int(idx.max()) + 1)

    def points(self, name: str, agg: str = "mean") -> tuple[np.ndarray, np.ndarray]:
        """(bin centre times, values) of the bins that hold `name`: agg is mean, max,
        sum or trailing (see TRAILING_N). Costs O(max_bins)."""
        i = self._index[name]
        n = self.used
        c = self.cnt[i, :n]
        ok = c > 0
        if agg == "trailing":
            cs, cc = np.cumsum(self.sum[i, :n]), np.cumsum(c)
            k = np.searchsorted(cc, cc - TRAILING_N, side="right") - 1  # the bin before the window
            prev_s = np.where(k >= 0, cs[np.maximum(k, 0)], 0.0)
            prev_c = np.where(k >= 0, cc[np.maximum(k, 0)], 0)
            v = ((cs - prev_s) / np.maximum(cc - prev_c, 1))[ok]
        elif agg == "mean":
            v = self.sum[i, :n][ok] / c[ok]
        elif agg == "max":
            v = self.max[i, :n][ok]
        else:
            v = self.sum[i, :n][ok]
        t = (self.origin or 0.0) + (np.nonzero(ok)[0] + 0.5) * self.width_s
        return t, v


@dataclass
class LevelTally:
    """Evaluation results against one opponent (all time and the last RECENT)."""

    games: int = 0
    wins: int = 0
    losses: int = 0
    draws: int = 0
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RECENT))

    def add_many(self, results: np.ndarray) -> None:
        """Results: 1 win, 0 draw, -1 loss."""
        self.games += len(results)
        self.wins += int((results == 1).sum())
        self.losses += int((results == -1).sum())
        self.draws += int((results == 0).sum())
        self.recent.extend(results[-RECENT:].tolist())

    def as_dict(self) -> dict:
        def rate(w, d, n):
            return round((w + 0.5 * d) / n, 4) if n else None
        r = list(self.recent)
        return dict(games=self.games, wins=self.wins, losses=self.losses, draws=self.draws,
                    win_rate=rate(self.wins, self.draws, self.games),
                    recent_games=len(r), recent_win_rate=rate(r.count(1), r.count(0), len(r)))


SAMPLE_FIELDS = ("steps_per_s", "latency_ms", "latency_p95_ms", "latency_max_ms", "compute_ms", "update_s", "wait_s", "restarts")


def episode_fields(levels: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(f"{p}:{lvl}" for lvl in levels for p in ("score", "n")) + ("score:train", "n:train")


# The dashboard's plots: name -> list of (label, bins, field, aggregation). "trailing":
# the mean over the latest bins that hold at least TRAILING_N records (a bin of a few
# evaluation games is a coin toss; the line shows the rate over the last >= 20 games).
TRAILING_N = 20
WIN_RATE = "win_rate"  # one line per evaluation level, in the levels' order
PLOTS = {
    "steps_per_s": [("agent steps/s", "samples", "steps_per_s", "mean")],
    WIN_RATE: [],
    "latency_ms": [("round latency mean", "samples", "latency_ms", "mean"),
                   ("round latency p95", "samples", "latency_p95_ms", "mean"),
                   ("round latency max", "samples", "latency_max_ms", "max"),
                   ("compute", "samples", "compute_ms", "mean")],
    "update_s": [("update", "samples", "update_s", "mean"), ("wait for data", "samples", "wait_s", "mean")],
    "restarts": [("restarts (total)", "samples", "restarts", "max")],
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
        self.episodes = Columns(dict(t="f8", level="i1", result="i1", steps="i4", ret="f4", version="i4"))
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
        self.samples.add_many(t, latency_ms=_col(recs, "latency_ms_mean"), latency_p95_ms=_col(recs, "latency_ms_p95"),
                              latency_max_ms=_col(recs, "latency_ms_max"), compute_ms=_col(recs, "compute_ms_mean"))

    def add_update(self, t: float, rec: dict) -> None:
        """One learner.jsonl update line."""
        self.add_updates(np.array([t]), [rec])

    def add_updates(self, t: np.ndarray, recs: list[dict]) -> None:
        self._t(float(np.min(t)))
        self.updates += len(recs)
        self.last_update = recs[-1]
        self.samples.add_many(t, update_s=_col(recs, "update_s"), wait_s=_col(recs, "wait_s"))

    def add_episode(self, t: float, opponent: str, eval: bool, result: str, steps: int = 0, ret: float = 0.0,
                    version: int = 0) -> None:
        """One finished episode (episodes.jsonl's fields)."""
        self.add_episodes(np.array([t]), [opponent], [eval], [result], [steps], [ret], [version])

    def add_episodes(self, t: np.ndarray, opponents: list[str], evals: list[bool], results: list[str],
                     steps: list[int], rets: list[float], versions: list[int]) -> None:
        """Finished episodes, as equal-length lists (episodes.jsonl's fields): one numpy
        pass per batch, so a run's whole history reads as fast as its files parse."""
        n = len(t)
        if not n:
            return
        t = np.asarray(t, dtype=np.float64)
        self._t(float(t.min()))
        r = np.array([RESULTS.get(x, NO_RESULT) for x in results], dtype=np.int8)
        level = np.array([self._level.get(o, -1) for o in opponents], dtype=np.int8)
        ev = np.array(evals, dtype=bool)
        self.episodes.extend(t=t, level=level, result=r, steps=steps, ret=rets, version=versions)
        self.opponents.update(opponents)
        score = np.where(r == 1, 1.0, np.where(r == 0, 0.5, 0.0))
        decided = r != NO_RESULT  # a "truncated" episode has no result: not in the win rates
        for k, lvl in enumerate(self.eval_levels):
            m = ev & (level == k) & decided
            if m.any():
                self.levels.setdefault(lvl, LevelTally()).add_many(r[m])
                self.episode_bins.add_many(t[m], **{f"score:{lvl}": score[m], f"n:{lvl}": np.ones(int(m.sum()))})
        m = ~ev & decided
        if m.any():
            self.train.add_many(r[m])
            self.episode_bins.add_many(t[m], **{"score:train": score[m], "n:train": np.ones(int(m.sum()))})
        self.last_episode = dict(t=float(t[-1]), opponent=opponents[-1], eval=bool(ev[-1]), result=results[-1])

    def plots(self) -> dict:
        """{plot: [{label, t: [s since start], y: [...]}]}: O(max_bins) per line."""
        t0 = self.t0 or 0.0
        out = {}
        for name, lines in PLOTS.items():
            if name == WIN_RATE:
                lines = [(lvl, "episodes", f"score:{lvl}", "trailing") for lvl in self.eval_levels]
            out[name] = []
            for label, which, fld, agg in lines:
                bins = self.samples if which == "samples" else self.episode_bins
                t, y = bins.points(fld, agg)
                out[name].append(dict(label=label, t=np.round(t - t0, 2).tolist(), y=np.round(y, 4).tolist()))
        return out

    def evaluation(self) -> dict:
        return {lvl: self.levels[lvl].as_dict() for lvl in self.eval_levels if lvl in self.levels}


def _num(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x


def parse_ts(ts: str) -> float:
    """structlog's ISO 8601 UTC stamp ("...Z") as unix seconds."""
    return datetime.fromisoformat(ts).timestamp()


# ---- the run's files ----------------------------------------------------------------

LOG_FILES = ("events.jsonl", "inference.jsonl", "learner.jsonl", "episodes.jsonl")


class Tail:
    """New whole lines of a growing file since the last call (a partial last line waits
    for its newline; a file that shrank is read again from its start)."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self._part = b""

    def lines(self) -> list[bytes]:
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size < self.offset:
            self.offset, self._part = 0, b""
        if size == self.offset:
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        self.offset += len(data)
        data = self._part + data
        cut = data.rfind(b"\n") + 1
        self._part = data[cut:]
        return data[:cut].splitlines()


@dataclass
class GameInfo:
    """A game slot as the events tell it (file mode: no live supervisor to ask)."""

    slot: int
    pid: int | None = None
    runtime: str = ""
    state: str = "starting"
    restarts: int = 0
    causes: collections.Counter = field(default_factory=collections.Counter)
    started_at: float = 0.0


class RunFiles:
    """Feeds a RunSeries from a run folder's logs, reading only what is new.

    `live_sampler=True` means the status server samples steps/s and restarts from the
    supervisor itself, so the files' copies of those are not added to the series."""

    def __init__(self, run_dir: Path, series: RunSeries | None = None, live_sampler: bool = False):
        self.run_dir = Path(run_dir)
        self.series = series or RunSeries()
        self.live_sampler = live_sampler
        self.tails = {name: Tail(self.run_dir / name) for name in LOG_FILES}
        self.run: dict = {}  # run_start's fields
        self.shutdown: dict | None = None
        self.games: dict[int, GameInfo] = {}
        self.restarts: collections.Counter = collections.Counter()
        self.bad_rows = 0
        self.rounds = 0
        self.rows = 0
        self.bad_lines = 0
        self.last_ts: float | None = None

    def poll(self) -> int:
        """Read what the files gained; returns the number of records handled."""
        n = 0
        for name, tail in self.tails.items():
            lines = tail.lines()
            if not lines:
                continue
            recs, t = self._parse(lines)
            if recs:
                self.last_ts = max(self.last_ts or 0.0, float(t.max()))
                getattr(self, "_" + name.split(".")[0])(t, recs)
                n += len(recs)
        return n

    def _parse(self, lines: list[bytes]) -> tuple[list[dict], np.ndarray]:
        """Records with a good `ts`, and their times. One json.loads per batch (a torn
        or foreign line sends the batch down the line-by-line path, which skips it)."""
        try:
            recs = json.loads(b"[" + b",".join(lines) + b"]")
        except ValueError:
            recs = []
            for ln in lines:
                try:
                    recs.append(json.loads(ln))
                except ValueError:
                    self.bad_lines += 1
        good = [r for r in recs if isinstance(r, dict) and isinstance(r.get("ts"), str)]
        self.bad_lines += len(recs) - len(good)
        try:  # numpy parses ISO 8601 in C; it wants the "Z" off
            t = np.array([r["ts"].rstrip("Z") for r in good], dtype="datetime64[us]").astype(np.int64) / 1e6
        except ValueError:
            keep, ts = [], []
            for r in good:
                try:
                    ts.append(parse_ts(r["ts"]))
                    keep.append(r)
                except ValueError:
                    self.bad_lines += 1
            good, t = keep, np.array(ts, dtype=np.float64)
        return good, t

    def _events(self, t: np.ndarray, recs: list[dict]) -> None:
        for ti, rec in zip(t.tolist(), recs):
            self._event(ti, rec)

    def _event(self, t: float, rec: dict) -> None:
        ev = rec.get("event")
        s = self.series
        if ev == "run_start":
            self.run = dict(rec, started=t)
            s.t0 = t
            if not self.live_sampler:  # the restarts line starts at 0 and ends at shutdown
                s.add_sample(t, restarts=0)
            return
        slot = rec.get("slot")
        g = self.games.setdefault(slot, GameInfo(slot)) if isinstance(slot, int) and slot >= 0 else None
        if ev == "game_start" and g:
            g.pid, g.runtime, g.state, g.started_at = rec.get("pid"), rec.get("runtime", ""), "running", t
        elif ev == "game_restart" and g:
            g.state = "restarting"
            g.restarts = int(rec.get("restarts", g.restarts + 1))
            g.causes[rec.get("cause", "?")] += 1
            self.restarts[rec.get("cause", "?")] += 1
            if not self.live_sampler:
                s.add_sample(t, restarts=sum(self.restarts.values()))
        elif ev == "slot_failed" and g:
            g.state = "failed"
        elif ev == "bad_row":
            self.bad_rows += 1
        elif ev == "shutdown":
            self.shutdown = dict(rec, t=t)
            if not self.live_sampler:
                s.add_sample(t, restarts=sum(self.restarts.values()))
            for g in self.games.values():
                if g.state != "failed":
                    g.state = "stopped"

    def _inference(self, t: np.ndarray, recs: list[dict]) -> None:
        keep = [i for i, r in enumerate(recs) if r.get("event") == "rounds"]
        if not keep:
            return
        recs, t = [recs[i] for i in keep], t[keep]
        self.rounds += sum(int(r.get("rounds") or 0) for r in recs)
        self.rows += sum(int(r.get("rows") or 0) for r in recs)
        self.series.add_round_lines(t, recs)
        if not self.live_sampler:
            self.series.samples.add_many(t, steps_per_s=_col(recs, "rows"))

    def _learner(self, t: np.ndarray, recs: list[dict]) -> None:
        keep = [i for i, r in enumerate(recs) if r.get("event") == "update"]
        if keep:
            self.series.add_updates(t[keep], [recs[i] for i in keep])

    def _episodes(self, t: np.ndarray, recs: list[dict]) -> None:
        keep = [i for i, r in enumerate(recs) if r.get("event") == "episode"]
        if not keep:
            return
        recs, t = [recs[i] for i in keep], t[keep]
        self.series.add_episodes(
            t, [str(r.get("opponent", "")) for r in recs], [bool(r.get("eval")) for r in recs],
            [str(r.get("result", "")) for r in recs], [int(r.get("steps") or 0) for r in recs],
            _col(recs, "return"), [int(r.get("policy_version") or 0) for r in recs])


def _col(recs: list[dict], key: str) -> np.ndarray:
    """A field of many records as floats (NaN where missing or not a number)."""
    return np.array([_num(r.get(key)) for r in recs], dtype=np.float64)
