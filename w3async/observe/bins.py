"""Fixed-size numeric history: the columns and time bins a run's series are kept in.

- `Columns`: named numpy columns, grown by doubling, extended with new records only
  (the raw history: the CLI and the tests read it; nothing on a refresh scans it).
- `Bins`: a fixed budget of time bins (sum, count and max per field) updated on append;
  when time runs past the last bin, neighbours merge and the width doubles. A plot
  reads at most `max_bins` points, whatever the run's length.

Nothing here knows a log or a schema: series.py gives the fields their meaning.
"""

from __future__ import annotations

import math

import numpy as np

# "trailing" points: the mean over the latest bins that hold at least TRAILING_N records
# (a bin of a few evaluation games is a coin toss; the line shows the rate over the
# last >= 20 games).
TRAILING_N = 20


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


def floats(recs: list[dict], key: str) -> np.ndarray:
    """A field of many records as floats (NaN where missing or not a number)."""
    return np.array([_num(r.get(key)) for r in recs], dtype=np.float64)


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan
