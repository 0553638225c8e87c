"""Replays as the dashboard's viewer draws them: one JSON shape for any game, converted
here from the duel's replay files (w3async.games.duel.replay). Served by status.py at /replay/latest.
"""

from __future__ import annotations

import json
from pathlib import Path


class ReplayError(ValueError):
    """A replay file the viewer cannot show (missing, unreadable, wrong format)."""


VIEW_UNIT_KEYS = ("id", "type", "owner", "x", "y", "hp", "order", "target")


def replay_view(path: Path) -> dict:
    """A replay as the viewer's JSON (docs/status.md, "/replay/latest"):
        {map: {w, h, cells: [0 free | 1 blocked, row-major]}, side: agent side,
         types: [{name, sight, hp (max)}], owners: [names], orders: [names], meta: {...},
         steps: [{step, units: [{id, type, owner, x, y, hp, order, target, dest?}], fog: [...]?}]}
    Positions are in cells (floats); `dest` ([x, y] or null) is where a unit's order
    walks to. `fog` (0 hidden, 1 seen, per cell, for `side`) is
    optional: without it the viewer derives sight from `types`.

    A `.json` file is taken as that format already; any other file is a duel replay,
    read with w3async.games.duel.replay and converted by _duel_replay_view: the one place to adapt."""
    path = Path(path)
    try:
        if path.suffix == ".json":
            view = json.loads(path.read_text())
        else:
            view = _duel_replay_view(path)
    except ReplayError:
        raise
    except (OSError, ValueError) as e:  # w3async.games.duel.replay.ReplayError is a ValueError naming the file
        raise ReplayError(str(e) if str(path) in str(e) else f"replay {path}: {e}") from None
    for k in ("map", "steps"):
        if k not in view:
            raise ReplayError(f"replay {path}: no {k!r} in the viewer's format")
    return view


# The duel's maps as duel_map.c builds them (a replay names its map, it does not hold
# it): (w, h, obstacle rects, each mirrored through the centre). Keep in step with C.
DUEL_MAPS = {
    0: (32, 32, ((13, 5, 5, 3), (8, 20, 2, 4), (22, 12, 3, 2))),
    1: (32, 32, ((15, 0, 2, 6), (15, 9, 2, 7), (10, 3, 2, 6))),
    2: (48, 48, ((10, 4, 4, 12), (20, 16, 3, 8), (30, 2, 3, 10), (16, 30, 8, 3), (6, 34, 10, 2), (36, 20, 2, 6))),
}
# du_stats (duel_sim.c): name, sight in cells, hit points
DUEL_TYPES = [("base", 9, 3000), ("melee", 6, 160), ("ranged", 7, 90), ("heavy", 6, 380), ("creep", 4, 200),
              ("boss", 5, 600)]
DUEL_ORDERS = ["idle", "move", "hold", "retreat"]
DUEL_FP = 256
DUEL_MAP_MAX = 48  # a cell index is y * DU_MAP_MAX + x, whatever the map's size


def _duel_cells(map_id: int) -> tuple[int, int, list[int]]:
    w, h, rects = DUEL_MAPS[map_id]
    cells = [0] * (w * h)
    for x0, y0, rw, rh in rects:
        for y in range(y0, y0 + rh):
            for x in range(x0, x0 + rw):
                if 0 <= x < w and 0 <= y < h:
                    cells[y * w + x] = 1
                    cells[(h - 1 - y) * w + (w - 1 - x)] = 1
    return w, h, cells


def _duel_replay_view(path: Path) -> dict:
    """A duel replay (w3async.games.duel.replay) with states, in the viewer's format."""
    from w3async.games.duel.replay import UNIT_FIELDS, read_replay  # noqa: PLC0415 (not needed for JSON replays)

    rep = read_replay(path, require_end=False)
    hd = rep.header
    if not hd.has_states:
        raise ReplayError(f"replay {path}: recorded without states (--states): nothing to draw")
    if hd.map not in DUEL_MAPS:
        raise ReplayError(f"replay {path}: map {hd.map} unknown to the viewer (replay_view.DUEL_MAPS)")
    w, h, cells = _duel_cells(hd.map)
    side = 0 if hd.sides[0] == "agent" or hd.sides[1] != "agent" else 1
    steps = []
    for st in rep.steps:
        units = []
        for r in st.units.tolist():  # tuples of Python ints, in UNIT_FIELDS order
            u = dict(zip(UNIT_FIELDS, r))
            d = u["dest"]
            units.append(dict(id=u["id"], type=u["type"], owner=u["owner"], x=round(u["x"] / DUEL_FP, 3),
                              y=round(u["y"] / DUEL_FP, 3), hp=u["hp"], order=u["order"], target=u["target"],
                              dest=[d % DUEL_MAP_MAX + 0.5, d // DUEL_MAP_MAX + 0.5] if d >= 0 else None))
        steps.append(dict(step=st.step, units=units))
    end = rep.end
    return dict(map=dict(w=w, h=h, cells=cells, name=hd.map_name), side=side,
                types=[dict(name=n, sight=s, hp=hp) for n, s, hp in DUEL_TYPES], owners=[hd.sides[0], hd.sides[1], "neutral"],
                orders=DUEL_ORDERS, steps=steps,
                meta=dict(game="duel", seed=str(hd.seed),  # a u64: past what a JS number holds
                          lane=hd.lane, episode=hd.episode, sides=list(hd.sides),
                          winner=end.winner if end else None, steps=len(steps)))
