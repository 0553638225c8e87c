"""Policies the supervisor can answer with before a network is involved, and the
answerer that wraps them.

A policy maps a gathered Batch to (actions (n, n_heads) int32, versions (n,) uint32).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from w3async.observe.logs import JsonLog
from w3async.run_folder import RunFolder
from w3async.runtime.answerer import RunControl
from w3async.sync import layout
from w3async.sync.gather import Batch


class CheckPolicy:
    """The answers the null game recomputes (w3s_check_answer): a lost, stale or
    misrouted answer fails its check."""

    def __init__(self, capacity: int, n_heads: int = layout.N_HEADS):
        self.versions = np.zeros(capacity, np.uint32)
        self.n_heads = n_heads

    def __call__(self, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        n = b.n
        return layout.check_answer(b.obs_seq[:n], b.lane[:n], b.side[:n], n_heads=self.n_heads), self.versions[:n]


# The bit generators whose raw words are 64 random bits (numpy's default, PCG64, among them).
_RAW64 = (np.random.PCG64, np.random.PCG64DXSM, np.random.Philox, np.random.SFC64)


def sample_masked(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniform allowed choice per head for each row of a batched mask (n, n_heads,
    head_max), int64; choice 0 for a head that allows none. Each choice scores a random
    31-bit number, a masked one 0, and the best wins: the bit generator's raw words (half
    the cost of its floats, which were two thirds of this) and a multiply (a boolean mask's
    setitem cost as much again). Two allowed choices tie once in ~2^31 draws."""
    n = mask.size
    if isinstance(rng.bit_generator, _RAW64):
        scores = rng.bit_generator.random_raw((n + 1) // 2).view(np.uint32)[:n].reshape(mask.shape)
        scores |= 1  # never 0: an allowed choice scores above a masked one
    else:  # MT19937's raw words are 32-bit in 64: half of them would be 0
        scores = rng.integers(1, 1 << 32, mask.shape, dtype=np.uint32)
    np.multiply(scores, mask, out=scores, casting="unsafe")  # (a mask of 0 and 1, whatever its dtype)
    return scores.argmax(axis=-1)


class RandomPolicy:
    """Uniform over each head's allowed choices (sample_masked)."""

    def __init__(self, capacity: int, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.versions = np.zeros(capacity, np.uint32)

    def __call__(self, b: Batch) -> tuple[np.ndarray, np.ndarray]:
        n = b.n
        return sample_masked(b.mask[:n], self.rng).astype(np.int32), self.versions[:n]


class PolicyAnswerer:
    """An Answerer (runtime/answerer.py) that answers each batch at once with a policy
    (check, random, or one a test or benchmark passes), and logs the rounds' counts to
    inference.jsonl. With a `book` (learn/tallies.EpisodeBook, handed in by the
    composition root), the episodes the games end are written to episodes.jsonl and the
    evaluation rows' results tallied as a learner's run does: a fixed policy's run is the
    baseline a learner is compared with."""

    failure: str | None = None
    gathers = False  # the loop runs its rounds

    def __init__(self, control: RunControl, policy: Callable[[Batch], tuple[np.ndarray, np.ndarray]], book=None):
        self.control = control
        self.policy = policy
        self.book = book
        self.log: JsonLog | None = None
        self._last = (0, 0)

    def start(self, loop) -> None:
        folder = RunFolder(self.control.run_dir)
        self.log = JsonLog(folder.inference_log)
        if self.book is not None:
            self.book.tally.log = JsonLog(folder.episodes_log)

    def submit(self, b: Batch) -> None:
        n = b.n
        actions, versions = self.policy(b)
        if self.book is not None:
            rows = b.rows[:n].astype(np.int64)
            self.book.record(b, rows, self.book.ended(b, rows), 0)
        self.control.answer_now(b.rows[:n], b.obs_seq[:n], actions, versions)

    def rows_reset(self, rows: slice) -> None:
        # nothing pending: every batch was answered as it came; a game's new start begins its rows' returns again
        if self.book is not None:
            self.book.tally.reset(np.arange(rows.start, rows.stop))

    def flush_round_stats(self) -> dict | None:
        c = self.control.counters
        rounds, rows = c.rounds - self._last[0], c.agent_steps - self._last[1]
        self._last = (c.rounds, c.agent_steps)
        if not rounds or self.log is None:
            return None
        line = dict(rounds=rounds, rows=rows, rows_per_round=round(rows / rounds, 2), learner_phase="none")
        self.log.info("rounds", **line)
        return line

    def progress(self) -> str:
        """The console's words: the evaluation rows' win rates, where there are any."""
        return self.book.tally.progress() if self.book is not None else ""

    def stop(self) -> None:
        if self.log is not None:
            self.log.close()
        if self.book is not None and self.book.tally.log is not None:
            self.book.tally.log.close()


def policy_answerer(control: RunControl, name: str, book=None) -> PolicyAnswerer:
    """The recipe's fixed policy ("check" or "random") as an answerer; `book` as
    PolicyAnswerer's."""
    if name == "check":
        return PolicyAnswerer(control, CheckPolicy(control.n_rows, control.spec.layout.n_heads), book)
    if name == "random":
        return PolicyAnswerer(control, RandomPolicy(control.n_rows), book)
    raise ValueError(f"supervisor.policy {name!r} is not a fixed policy ('check', 'random')")
