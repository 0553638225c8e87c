"""The best policy of a run: `checkpoints/best.pt`, chosen by its evaluation score.

The rule (one number, the same at every checkpoint): the score is the mean over the
run's evaluation levels (the labels of its `role = "eval"` groups, e.g. ai:easy and
ai:normal) of each level's score over its last `evaluation.window` outcomes
(w3async/outcomes.py): a decisive win counts 1, a win on the tie-break at the game's
time limit 0.5, a draw or a loss 0; a truncated game is no game. So a policy that wins
outright ranks above one that wins on points. It exists only once every level has a full window, so
a score never rests on a handful of games (nor, after a resume, on the few games played
since: the windows start empty). At each checkpoint the current policy becomes best.pt
when its score is strictly above the best so far.

    keeper = BestKeeper(run_dir, levels=("ai:easy", "ai:normal"), window=50)
    keeper.load()                               # on resume: the best so far from best.pt
    rec = keeper.candidate(windows, version, agent_steps)   # None: no full window, or not better
    if rec: save_best(run_dir, ..., best=rec); keeper.accept(rec)

best.pt is a checkpoint (checkpoint.py's format, written atomically the same way) with a
`best` record: the score, the update and agent steps it was taken at, and per level the
games, wins, losses, draws, win rate and its 95% Wilson interval. `checkpoints/best.json`
holds the same record for /status and the dashboard (best.pt is authoritative: a crash
between the two leaves best.json one best behind, never ahead).

The games of a window were played by the policies of the last few updates, not only by
the one saved: the score is the recent policy's, the usual compromise of keeping the
best by a running evaluation (`python -m w3async eval` measures the saved one alone).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from w3async import files, outcomes
from w3async.run_folder import RunFolder

BEST_JSON = "best.json"  # beside checkpoint.BEST_PT, for the status reader
RULE = ("mean over the evaluation levels of each level's score over its last `window` games (a decisive win 1, a "
        f"win at the time limit {outcomes.TIME_LIMIT_WIN_WEIGHT}, else 0), once every level has a full window")


def wilson(wins: int, games: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (E. B. Wilson 1927; z = 1.96: 95%).
    (0, 1) for no games. Unlike the normal approximation it stays inside [0, 1] and is
    not empty at 0 or n wins."""
    if games <= 0:
        return 0.0, 1.0
    p = wins / games
    denom = 1.0 + z * z / games
    centre = (p + z * z / (2 * games)) / denom
    half = z * math.sqrt(p * (1 - p) / games + z * z / (4 * games * games)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def level_record(results: Iterable[str]) -> dict:
    """A level's outcomes (outcomes.KINDS, "truncated") as outcomes.tally's counts and
    rates, with the 95% Wilson interval of its win rate (lo, hi) and of its decisive
    rate (decisive_lo, decisive_hi)."""
    t = outcomes.tally(results)
    lo, hi = wilson(t["wins"], t["games"])
    dlo, dhi = wilson(t["decisive_wins"], t["games"])
    return dict(t, lo=round(lo, 4), hi=round(hi, 4), decisive_lo=round(dlo, 4), decisive_hi=round(dhi, 4))


def _per_level(windows: Mapping[str, Iterable], levels: Iterable[str], window: int, record) -> dict | None:
    """{level: record(its last `window` entries)}; None unless every level (one at
    least) has a full window."""
    per = {}
    for lvl in levels:
        last = list(windows.get(lvl, ()))[-window:]
        if len(last) < window:
            return None
        per[lvl] = record(last)
    return per or None


def score(windows: Mapping[str, Iterable[str]], levels: Iterable[str], window: int) -> dict | None:
    """The rule's score of the current windows: {score, levels: {label: level_record},
    games, wins, lo, hi (the pooled games' Wilson interval)}; None unless every level has
    a full window (or when there are no levels)."""
    per = _per_level(windows, levels, window, level_record)
    if per is None:
        return None
    games = sum(r["games"] for r in per.values())
    wins = sum(r["wins"] for r in per.values())
    decisive = sum(r["decisive_wins"] for r in per.values())
    lo, hi = wilson(wins, games)
    return dict(score=round(sum(r["score"] or 0.0 for r in per.values()) / len(per), 4), window=window, levels=per,
                games=games, wins=wins, decisive_wins=decisive, lo=round(lo, 4), hi=round(hi, 4))


def return_score(returns: Mapping[str, Iterable[float]], levels: Iterable[str], window: int) -> dict | None:
    """A game scored by points (Game.scored_by "return"): the mean over levels of each
    level's mean return over its last `window` ended episodes, {score, levels: {label:
    {games, mean_return}}, games, by: "return"}; None unless every level has a full window."""
    per = _per_level(returns, levels, window,
                     lambda rets: dict(games=len(rets), mean_return=outcomes.mean_return(rets)))
    if per is None:
        return None
    return dict(score=round(sum(r["mean_return"] for r in per.values()) / len(per), 4), window=window, levels=per,
                games=sum(r["games"] for r in per.values()), by="return")


RULE_RETURN = ("mean over the evaluation levels of each level's mean return over its last `window` episodes, once "
               "every level has a full window (a game scored by points)")


class BestKeeper:
    """The best score so far of one run and the rule that replaces it: by outcome (the
    win score of outcomes.py), or by return for a game scored by points."""

    def __init__(self, run_dir: Path | str, levels: Iterable[str], window: int, by: str = "outcome"):
        self.run_dir, self.levels, self.window = Path(run_dir), tuple(levels), int(window)
        self.by = by  # Game.scored_by: "outcome" or "return"
        self.best: dict | None = None  # the record of best.pt (None: none yet)

    @property
    def path(self) -> Path:
        from w3async.learn.checkpoint import BEST_PT  # noqa: PLC0415 (checkpoint imports torch)

        return RunFolder(self.run_dir).checkpoints / BEST_PT

    def load(self) -> dict | None:
        """The best so far from best.pt (a resume), or None when there is none. Raises
        CheckpointLoadError (the file and why) for a best.pt that does not load: a
        resume must not overwrite it with a worse policy behind the user's back."""
        from w3async.learn.checkpoint import CheckpointLoadError, load_checkpoint  # noqa: PLC0415

        if not self.path.exists():
            return None
        ckpt = load_checkpoint(self.path)
        rec = ckpt.get("best")
        if not isinstance(rec, dict) or not isinstance(rec.get("score"), (int, float)):
            raise CheckpointLoadError(self.path, "a best.pt without its `best` record (score)")
        self.best = rec
        return rec

    def _score(self, windows, returns) -> dict | None:
        if self.by == "return":
            return return_score(returns or {}, self.levels, self.window)
        return score(windows, self.levels, self.window)

    def score_now(self, windows: Mapping[str, Iterable[str]], returns: Mapping[str, Iterable[float]] | None = None
                  ) -> float | None:
        """The rule's score of the current windows (outcomes; `returns`, each level's
        ended episodes' returns, for a game scored by them); None until every level has a
        full one."""
        s = self._score(windows, returns)
        return None if s is None else s["score"]

    def candidate(self, windows: Mapping[str, Iterable[str]], version: int, agent_steps: int,
                  returns: Mapping[str, Iterable[float]] | None = None) -> dict | None:
        """The record for the current policy when its score beats the best so far, else None."""
        s = self._score(windows, returns)
        if s is None or (self.best is not None and not s["score"] > self.best["score"]):
            return None
        return dict(s, updates=int(version), agent_steps=int(agent_steps),
                    rule=RULE_RETURN if self.by == "return" else RULE, saved_at=time.time(),
                    previous_score=None if self.best is None else self.best["score"])

    def accept(self, rec: dict) -> None:
        """rec is best.pt now (written): best.json mirrors it for the status reader."""
        import json  # noqa: PLC0415

        self.best = rec
        files.atomic_write_text(self.path.with_name(BEST_JSON), json.dumps(dict(rec, path=str(self.path))) + "\n")
