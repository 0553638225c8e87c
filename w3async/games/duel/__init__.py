"""The duel (games/duel/, docs/duel.md): the reference game's registry entry.

Opponents are labelled from the process's `W3D_SIDES` ("agent,ai:easy" -> "ai:easy");
evaluation plays the built-in AI's three levels; eval groups record replays into the
run's `replays/` (`W3D_RECORD_DIR = "{run_dir}/replays"`), which viewer.py draws and
parity.py plays back.
"""

from __future__ import annotations

from pathlib import Path

from w3async.games import Game, sign_result
from w3async.games.duel.spec import DUEL_SPEC

AI_LEVELS = ("ai:easy", "ai:normal", "ai:hard")
REPLAY_DIR = "replays"  # where recipes point the eval games' W3D_RECORD_DIR


def opponent_of(env: dict) -> str:
    """The label of a group's second side from W3D_SIDES ("agent,ai:easy" -> "ai:easy");
    "self" for two agent sides or no W3D_SIDES."""
    sides = [x.strip() for x in env.get("W3D_SIDES", "agent,agent").split(",")]
    return sides[1] if len(sides) > 1 and sides[1] != "agent" else "self"


def result_of(reward: float, env: dict) -> str:
    """The last reward's outcome. With W3D_DRAW_REWARD set (a draw scored d for both
    sides): the nearest of +1 win, -1 loss and d draw, so shaped rewards' last-step
    increments do not change it while they stay under half the gap (d = -0.5 or 0.5
    leaves 0.25 each way); d = -1 makes a draw a loss here too, and the training tally
    turns a lane that both sides lost into a draw (EpisodeTally.outcomes). Without it:
    the sign."""
    d = env.get("W3D_DRAW_REWARD", "").strip()
    if not d:
        return sign_result(reward, env)
    try:
        draw = float(d)
    except ValueError:  # the game refuses it at its start: nothing ends
        return sign_result(reward, env)
    return min((("win", 1.0), ("loss", -1.0), ("draw", draw)), key=lambda x: abs(reward - x[1]))[0]


def eval_env(env: dict, level: str, seed: int) -> dict:
    """A group's environment made to play `level` ("ai:hard") at fixed seeds: win/loss
    rewards (a draw 0), W3D_SEED set, no replays recorded; the rest (W3D_TIME_LIMIT, W3D_MAP, ...) kept."""
    out = {k: v for k, v in env.items()
           if not k.startswith("W3D_RECORD_") and k not in ("W3D_DRAW_REWARD", "W3D_TIME_LIMIT_WIN")}
    out.update(W3D_SIDES=f"agent,{level}", W3D_REWARD="win", W3D_SEED=str(seed))
    return out


def replay_view(path: Path) -> dict | None:
    from w3async.games.duel.viewer import replay_view as view  # noqa: PLC0415 (only when a replay is shown)

    return view(path)


def row_view(obs: dict) -> dict:
    from w3async.games.duel.viewer import row_view as view  # noqa: PLC0415 (only when the env renders)

    return view(obs)


GAME = Game(name="duel", spec=DUEL_SPEC, opponent_of=opponent_of, eval_levels=AI_LEVELS, replay_dir=REPLAY_DIR,
            replay_suffixes=(".w3dr", ".json"), replay_view=replay_view, row_view=row_view, result_of=result_of,
            eval_env=eval_env, parity="w3async.games.duel.parity")
