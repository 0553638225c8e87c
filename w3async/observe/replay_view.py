"""Replays as the dashboard's viewer draws them: one JSON shape for any game, converted
from a game's own replay files by the game's viewer (its games registry entry's
`replay_view`). Served by status.py at /replay/latest.
"""

from __future__ import annotations

import json
from pathlib import Path

from w3async import games


class ReplayError(ValueError):
    """A replay file the viewer cannot show (missing, unreadable, wrong format)."""


VIEW_UNIT_KEYS = ("id", "type", "owner", "x", "y", "hp", "order", "target")


def replay_view(path: Path, game: str | None = None) -> dict:
    """A replay as the viewer's JSON (docs/status.md, "/replay/latest"):
        {map: {w, h, cells: [0 free | 1 blocked, row-major]}, side: agent side,
         types: [{name, sight, hp (max)}], owners: [names], orders: [names], meta: {...},
         steps: [{step, units: [{id, type, owner, x, y, hp, order, target, dest?}], fog: [...]?}]}
    Positions are in cells (floats); `dest` ([x, y] or null) is where a unit's order
    walks to. `fog` (0 hidden, 1 seen, per cell, for `side`) is
    optional: without it the viewer derives sight from `types`.

    A `.json` file is taken as that format already; any other file goes to the viewer
    of `game` when named, else to each registered game's viewer until one claims it."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            view = json.loads(path.read_text())
        else:
            view = _game_view(path, game)
    except ReplayError:
        raise
    except (OSError, ValueError) as e:  # a game's replay errors are ValueErrors naming the file
        raise ReplayError(str(e) if str(path) in str(e) else f"replay {path}: {e}") from None
    if not isinstance(view, dict):
        raise ReplayError(f"replay {path}: not a JSON object")
    for k in ("map", "steps"):
        if k not in view:
            raise ReplayError(f"replay {path}: no {k!r} in the viewer's format")
    return view


def _game_view(path: Path, game: str | None) -> dict:
    candidates = [games.get(game)] if game else list(games.all_games())
    viewers = [g for g in candidates if g.replay_view is not None]
    for g in viewers:
        view = g.replay_view(path)
        if view is not None:
            return view
    raise ReplayError(f"replay {path}: no game's viewer reads it (viewers: "
                      f"{', '.join(g.name for g in viewers) or 'none'})")
