"""A run folder's JSON-lines logs (docs/logs.md), tailed into a RunSeries.

`RunFiles` reads each log (`Tail`) from where it last stopped, whole lines only, and
feeds a RunSeries (series.py) and its own tallies (games from the events, restarts, bad
rows, rounds, rows). The same code serves a live run and a finished one
(`python -m w3async status`): the status server's thread polls it once a snapshot.
"""

from __future__ import annotations

import collections
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from w3async.observe.bins import floats
from w3async.observe.series import SAMPLE_FIELDS, RunSeries
from w3async.run_folder import RunFolder


def parse_ts(ts: str) -> float:
    """structlog's ISO 8601 UTC stamp ("...Z") as unix seconds."""
    return datetime.fromisoformat(ts).timestamp()


LOG_FILES = RunFolder.LOGS


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
            # A resume's start: the run lives again, its life read from this start (the
            # earlier shutdown said it ended: /status showed a running resume as ended,
            # with a negative uptime). The earlier starts' records stay counted.
            self.run = dict(rec, started=t)
            self.shutdown = None
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
        elif ev == "accounting" and not self.live_sampler and isinstance(rec.get("kinds"), dict):
            s.add_sample(t, **{f"{fig}:{k}": v.get(fig) for k, v in rec["kinds"].items() if isinstance(v, dict)
                               for fig in ("cpu", "rss_mb") if f"{fig}:{k}" in SAMPLE_FIELDS})
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
            self.series.samples.add_many(t, steps_per_s=floats(recs, "rows"))

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
            floats(recs, "return"), [int(r.get("policy_version") or 0) for r in recs], floats(recs, "discarded"),
            [str(r.get("end") or "decisive") for r in recs])
