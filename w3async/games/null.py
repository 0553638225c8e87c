"""The null game (games/null/null_game.c): lanes of two sides that post at once and
check every answer. No opponents to label (every group plays itself), no evaluation
levels, no replays, no parity tool."""

from __future__ import annotations

from w3async.games import Game
from w3async.games.spec import GameSpec
from w3async.sync import layout

NULL_SPEC = GameSpec("null", n_types=8, head_sizes=(16, 16, 16, layout.E_MAX), pointer_head=3)

GAME = Game(name="null", spec=NULL_SPEC)
