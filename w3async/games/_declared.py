"""A game declared by a recipe (its [spec] table, or `spec = "FILE.toml"`): the Game
made from plain values, with no Python of the user's. recipes/spec.py validates the
table and calls `make_game`; the registry's `declare` adds the result.

What a declared game can say is data: the table's sizes, the variable that labels the
opponent, each evaluation level's environment and command line, how a last reward
reads as a result, where replays land. A replay viewer or a parity tool is Python; the
table may name one by module path (resolved by recipes/spec.py before this is called).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from w3async.games import Game
from w3async.games.spec import GameSpec
from w3async.sync import layout


@dataclass(frozen=True)
class Level:
    """One evaluation level: what its groups' environment and command line become."""

    env: dict[str, str]
    args: tuple[str, ...] | None  # an injected game's args for this level (None: the group's own)


def make_game(name: str, *, n_types: int, head_sizes: tuple[int, ...], pointer_head: int | None,
              noop: tuple, row: layout.Layout, opponent_env: str, opponent_default: str, levels: dict[str, Level], seed_env: str,
              result: str, draw_within: float, rewards: dict[str, float], replay_dir: str,
              replay_suffixes: tuple[str, ...], replay_view: Callable[[Path], dict | None] | None,
              parity: str) -> Game:
    """The Game of a declared spec. ValueError (GameSpec's, Game's) for what the values
    do not allow together; recipes/spec.py checks each value before, so that a user sees
    the key."""
    spec = GameSpec(name, n_types=n_types, head_sizes=head_sizes, pointer_head=pointer_head, noop=noop, layout=row)

    def opponent_of(env: dict) -> str:
        """The value of opponent_env in the group's environment; opponent_default (e.g.
        "self") when it is unset or empty."""
        who = env.get(opponent_env, "").strip() if opponent_env else ""
        return who or opponent_default

    def result_of(reward: float, env: dict) -> str:
        """"sign": a win above draw_within, a loss below -draw_within, a draw between;
        "nearest": the result whose reward (win, loss, draw) is nearest the last one;
        "score": none (no winner: the return is the score)."""
        if result == "score":
            return "none"
        if result == "nearest":
            return min(("win", "loss", "draw"), key=lambda k: abs(reward - rewards[k]))
        return "win" if reward > draw_within else "loss" if reward < -draw_within else "draw"

    def eval_env(env: dict, level: str, seed: int) -> dict:
        """The group's environment, the level's label in opponent_env (so the group's
        episodes are tallied under it), the seed in seed_env, then the level's own env."""
        out = dict(env)
        if opponent_env:
            out[opponent_env] = level
        if seed_env:
            out[seed_env] = str(seed)
        out.update(levels[level].env)
        return out

    def eval_args(args: list[str], level: str, seed: int) -> list[str]:
        """The level's args when it has its own ("{eval_seed}" filled in), else the group's."""
        own = levels[level].args
        return list(args) if own is None else [a.replace("{eval_seed}", str(seed)) for a in own]

    return Game(name=name, spec=spec, opponent_of=opponent_of, eval_levels=tuple(levels),
                replay_dir=replay_dir or None, replay_suffixes=replay_suffixes, replay_view=replay_view,
                result_of=result_of, scored_by="return" if result == "score" else "outcome",
                eval_env=eval_env if levels else None,
                eval_args=eval_args if any(lv.args is not None for lv in levels.values()) else None,
                parity=parity or None)
