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
  restarts, win rate against each built-in AI level) and the running totals that
  /status reports, fed live (the status server's sampler) or from the run's files.
- `RunFiles`: tails the run folder's JSON-lines files (docs/logs.md) from where it
  last stopped, whole lines only, and feeds a RunSeries; the same code serves a live
  run and a finished one (`python -m w3async status`).
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

# Evaluation opponents (the built-in AI's levels), in the order the plots use.
AI_LEVELS = ("ai:easy", "ai:normal", "ai:hard")
RESULTS = {"win": 1, "draw": 0, "loss": -1}
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

    def append(self, **values) -> None:
        """One record; a column not named gets 0 (NaN for floats)."""
        self._reserve(1)
        for k, a in self._cols.items():
            a[self.n] = values.get(k, np.nan if a.dtype.kind == "f" else 0)
        self.n += 1


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

    def points(self, name: str, agg: str = "mean") -> tuple[np.ndarray, np.ndarray]:
        """(bin centre times, values) of the bins that hold `name`: agg is mean, max or
        sum. Costs O(max_bins)."""
        i = self._index[name]
        n = self.used
        c = self.cnt[i, :n]
        ok = c > 0
        if agg == "mean":
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

    def add(self, result: int) -> None:
        self.games += 1
        self.wins += result == 1
        self.losses += result == -1
        self.draws += result == 0
        self.recent.append(result)

    def as_dict(self) -> dict:
        def rate(w, d, n):
            return round((w + 0.5 * d) / n, 4) if n else None
        r = list(self.recent)
        return dict(games=self.games, wins=self.wins, losses=self.losses, draws=self.draws,
                    win_rate=rate(self.wins, self.draws, self.games),
                    recent_games=len(r), recent_win_rate=rate(r.count(1), r.count(0), len(r)))


SAMPLE_FIELDS = ("steps_per_s", "latency_ms", "latency_p95_ms", "latency_max_ms", "compute_ms", "update_s", "wait_s", "restarts")
EPISODE_FIELDS = tuple(f"{p}:{lvl}" for lvl in AI_LEVELS for p in ("score", "n")) + ("score:self", "n:self")

# The dashboard's plots: name -> list of (label, bins, field, aggregation).
PLOTS = {
    "steps_per_s": [("agent steps/s", "samples", "steps_per_s", "mean")],
    "win_rate": [(lvl, "episodes", f"score:{lvl}", "mean") for lvl in AI_LEVELS],
    "latency_ms": [("round latency mean", "samples", "latency_ms", "mean"),
                   ("round latency p95", "samples", "latency_p95_ms", "mean"),
                   ("round latency max", "samples", "latency_max_ms", "max"),
                   ("compute", "samples", "compute_ms", "mean")],
    "update_s": [("update", "samples", "update_s", "mean"), ("wait for data", "samples", "wait_s", "mean")],
    "restarts": [("restarts (total)", "samples", "restarts", "max")],
}


class RunSeries:
    """The run's series and running totals. Times are unix seconds; `t0` is the run's
    start (the first time seen, or run_start's when known)."""

    def __init__(self, max_bins: int = 240):
        self.t0: float | None = None
        self.samples = Bins(SAMPLE_FIELDS, max_bins)
        self.episode_bins = Bins(EPISODE_FIELDS, max_bins)
        self.episodes = Columns(dict(t="f8", level="i1", result="i1", steps="i4", ret="f4", version="i4"))
        self.levels: dict[str, LevelTally] = {}
        self.selfplay = LevelTally()
        self.opponents: collections.Counter = collections.Counter()
        self.last_episode: dict | None = None
        self.last_eval_replay: str | None = None
        self.last_round: dict | None = None  # inference.jsonl's last line
        self.last_update: dict | None = None  # learner.jsonl's last update
        self.updates = 0

    def _t(self, t: float) -> float:
        if self.t0 is None:
            self.t0 = t
        return t

    def add_sample(self, t: float, **values: float) -> None:
        """Per-second figures (SAMPLE_FIELDS; any subset)."""
        self.samples.add(self._t(t), **values)

    def add_round_line(self, t: float, rec: dict) -> None:
        """One inference.jsonl line (one second of rounds)."""
        rec = round_line(rec)
        self.last_round = rec
        self.add_sample(t, latency_ms=_num(rec.get("latency_ms_mean")),
                        latency_p95_ms=_num(rec.get("latency_ms_p95")), latency_max_ms=_num(rec.get("latency_ms_max")),
                        compute_ms=_num(rec.get("compute_ms_mean")))

    def add_update(self, t: float, rec: dict) -> None:
        """One learner.jsonl update line."""
        self.updates += 1
        self.last_update = rec
        self.add_sample(t, update_s=_num(rec.get("update_s")), wait_s=_num(rec.get("wait_s")))

    def add_episode(self, t: float, opponent: str, eval: bool, result: str, steps: int = 0, ret: float = 0.0,
                    version: int = 0, replay: str | None = None) -> None:
        """One finished episode (episodes.jsonl's fields)."""
        t = self._t(t)
        r = RESULTS.get(result, 0)
        score = 1.0 if r == 1 else 0.5 if r == 0 else 0.0
        level = AI_LEVELS.index(opponent) if opponent in AI_LEVELS else -1
        self.episodes.append(t=t, level=level, result=r, steps=steps, ret=ret, version=version)
        self.opponents[opponent] += 1
        if eval and level >= 0:
            self.levels.setdefault(opponent, LevelTally()).add(r)
            self.episode_bins.add(t, **{f"score:{opponent}": score, f"n:{opponent}": 1})
            if replay:
                self.last_eval_replay = replay
        elif not eval:
            self.selfplay.add(r)
            self.episode_bins.add(t, **{"score:self": score, "n:self": 1})
        self.last_episode = dict(t=t, opponent=opponent, eval=eval, result=result)

    def plots(self) -> dict:
        """{plot: [{label, t: [s since start], y: [...]}]}: O(max_bins) per line."""
        t0 = self.t0 or 0.0
        out = {}
        for name, lines in PLOTS.items():
            out[name] = []
            for label, which, fld, agg in lines:
                bins = self.samples if which == "samples" else self.episode_bins
                t, y = bins.points(fld, agg)
                out[name].append(dict(label=label, t=np.round(t - t0, 2).tolist(), y=np.round(y, 4).tolist()))
        return out

    def evaluation(self) -> dict:
        return {lvl: self.levels[lvl].as_dict() for lvl in AI_LEVELS if lvl in self.levels}


# inference.RoundStatsWindow.flush() names its means "<x>_mean_ms"; docs/logs.md names
# them "<x>_ms_mean". Both are read, the documented name first.
_ROUND_ALIASES = {"latency_ms_mean": "latency_mean_ms", "latency_ms_max": "latency_max_ms",
                  "compute_ms_mean": "compute_mean_ms", "compute_ms_max": "compute_max_ms"}


def round_line(rec: dict) -> dict:
    """An inference.jsonl line with the documented key names filled in from aliases."""
    out = dict(rec)
    for doc, alias in _ROUND_ALIASES.items():
        if out.get(doc) is None and alias in rec:
            out[doc] = rec[alias]
    return out


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
            handle = getattr(self, "_" + name.split(".")[0])
            for line in tail.lines():
                try:
                    rec = json.loads(line)
                    t = parse_ts(rec["ts"])
                except (ValueError, KeyError, TypeError):
                    self.bad_lines += 1  # a torn or foreign line: counted, skipped
                    continue
                self.last_ts = t if self.last_ts is None else max(self.last_ts, t)
                handle(t, rec)
                n += 1
        return n

    def _events(self, t: float, rec: dict) -> None:
        ev = rec.get("event")
        s = self.series
        if ev == "run_start":
            self.run = dict(rec, started=t)
            s.t0 = t
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
            for g in self.games.values():
                if g.state != "failed":
                    g.state = "stopped"

    def _inference(self, t: float, rec: dict) -> None:
        if rec.get("event") != "rounds":
            return
        self.rounds += int(rec.get("rounds") or 0)
        self.rows += int(rec.get("rows") or 0)
        self.series.add_round_line(t, rec)
        if not self.live_sampler:
            self.series.add_sample(t, steps_per_s=_num(rec.get("rows")))

    def _learner(self, t: float, rec: dict) -> None:
        if rec.get("event") == "update":
            self.series.add_update(t, rec)

    def _episodes(self, t: float, rec: dict) -> None:
        if rec.get("event") != "episode":
            return
        self.series.add_episode(t, str(rec.get("opponent", "")), bool(rec.get("eval")), str(rec.get("result", "")),
                                int(rec.get("steps") or 0), _num(rec.get("return")), int(rec.get("policy_version") or 0),
                                rec.get("replay"))
