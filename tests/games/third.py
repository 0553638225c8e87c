"""A third game, defined in the tests folder alone: a tiny spec over the null game's
binary (build/native/null_game) with 4 entity types (the processes get W3N_TYPES=4),
its own opponent labels (from THIRD_OPPONENT) and evaluation level, no replays and
no parity tool. `games.register(GAME)` makes it a recipe's `game = "third"`."""

from __future__ import annotations

from w3async.games import Game
from w3async.games.spec import GameSpec
from w3async.sync import layout

N_TYPES = 4
THIRD_SPEC = GameSpec("third", n_types=N_TYPES, head_sizes=(16, 16, 16, layout.E_MAX), pointer_head=3)


def opponent_of(env: dict) -> str:
    """THIRD_OPPONENT=bot -> "third:bot"; unset: self-play."""
    who = env.get("THIRD_OPPONENT", "").strip()
    return f"third:{who}" if who else "self"


GAME = Game(name="third", spec=THIRD_SPEC, opponent_of=opponent_of, eval_levels=("third:bot",))
