"""An episode's outcome, and the one definition of a win rate that every report uses.

An episode ends with a result (the game's reading of its last reward: "win", "loss",
"draw"; "truncated" when it was cut and has none) and an `end`: "decisive" (the game's
goal was reached: the duel's base destroyed) or "time_limit" (the game's own time limit
ended it and its tie-break rule gave the result: the row's FLAG_TIME_LIMIT). A win on
the tie-break is a win, but not the same one: an agent that learned to poke and wait
wins at the time limit.

    win rate       wins of either kind / games with a result (a draw is not a win; a
                   truncated episode is no game)
    decisive rate  decisive wins / the same games
    score          (decisive wins + TIME_LIMIT_WIN_WEIGHT x time-limit wins) / the same
                   games: what best.pt is chosen by (learn/best.py), so that a policy
                   winning outright ranks above one winning on points

The status (live and offline), /metrics, TensorBoard, the dashboard, `eval` and best.pt
all count through `tally`.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping

from w3async.sync import layout

RESULTS = ("win", "draw", "loss")
ENDS = ("decisive", "time_limit")
TIME_LIMIT_WIN_WEIGHT = 0.5
KINDS = ("win", "win:time_limit", "draw", "loss:time_limit", "loss")
"""The outcomes by kind, best first: a decisive win, a win on the tie-break at the time
limit, a draw, a loss on the tie-break, a decisive loss."""


def end_of(flags: int) -> str:
    """How an episode ended, from its last row's flags."""
    if flags & layout.FLAG_TIME_LIMIT and flags & layout.FLAG_DONE:
        return "time_limit"
    return "decisive" if flags & layout.FLAG_DONE else "truncated"


def outcome(result: str, end: str) -> str:
    """One of KINDS (or "truncated"): a win or loss at the time limit is marked as such."""
    if result not in RESULTS:
        return "truncated"
    return f"{result}:time_limit" if end == "time_limit" and result != "draw" else result


def mean_return(returns: Iterable[float]) -> float | None:
    """The mean of episodes' returns, rounded as every report shows it; None for none:
    the figure of a game scored by points (a spec's result = "score")."""
    r = list(returns)
    return round(sum(r) / len(r), 4) if r else None


def tally(outcomes: Iterable[str]) -> dict:
    """Counts by kind and the rates of the module's definition, over outcome strings (a
    bare result, as older logs have, counts as decisive)."""
    return tally_counts(collections.Counter(outcomes))


def tally_counts(counts: Mapping[str, int]) -> dict:
    """tally() of outcomes already counted by kind (anything else: truncated)."""
    n = {k: int(counts.get(k, 0)) for k in KINDS}
    games = sum(n.values())
    wins = n["win"] + n["win:time_limit"]

    def rate(x: float) -> float | None:
        return round(x / games, 4) if games else None

    return dict(games=games, wins=wins, decisive_wins=n["win"], time_limit_wins=n["win:time_limit"], draws=n["draw"],
                losses=n["loss"] + n["loss:time_limit"], time_limit_losses=n["loss:time_limit"],
                truncated=sum(counts.values()) - games, win_rate=rate(wins), decisive_rate=rate(n["win"]),
                score=rate(n["win"] + TIME_LIMIT_WIN_WEIGHT * n["win:time_limit"]))
