"""The duel's replays (w3async.games.duel.replay) in the dashboard viewer's JSON
(w3async.observe.replay_view documents the format): maps, unit types and orders as
the C side defines them, and the conversion."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from w3async.games.duel.replay import MAGIC, UNIT_FIELDS, ReplayError, read_replay

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


def duel_cells(map_id: int) -> tuple[int, int, list[int]]:
    w, h, rects = DUEL_MAPS[map_id]
    cells = [0] * (w * h)
    for x0, y0, rw, rh in rects:
        for y in range(y0, y0 + rh):
            for x in range(x0, x0 + rw):
                if 0 <= x < w and 0 <= y < h:
                    cells[y * w + x] = 1
                    cells[(h - 1 - y) * w + (w - 1 - x)] = 1
    return w, h, cells


def is_duel_replay(path: Path) -> bool:
    """The file starts with the duel's magic (an unreadable file raises OSError)."""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


def replay_view(path: Path) -> dict | None:
    """A duel replay with states in the viewer's format; None for a file that is not a
    duel replay. A broken duel replay raises ReplayError (a ValueError naming the file)."""
    path = Path(path)
    if not is_duel_replay(path):
        return None
    rep = read_replay(path, require_end=False)
    hd = rep.header
    if not hd.has_states:
        raise ReplayError(path, 0, "states", "recorded without states (--states): nothing to draw")
    if hd.map not in DUEL_MAPS:
        raise ReplayError(path, 0, "map", f"map {hd.map} unknown to the viewer (games/duel/viewer.py DUEL_MAPS)")
    w, h, cells = duel_cells(hd.map)
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
                          winner=end.winner if end else None, steps=len(steps),
                          result=None if not end or end.winner < 0 else "draw" if end.winner == 2
                          else "win" if end.winner == side else "loss"))


# What duel_obs.c writes into a row (keep in step with it): the map's one-hot in glob
# 17..19; an entity's owner one-hot (own, enemy, neutral) in features 0..2, its position
# as a fraction of the map in 3 and 4, its hit points as a fraction of its type's in 5.
OBS_MAP, OBS_OWNER, OBS_X, OBS_Y, OBS_HP = slice(17, 20), slice(0, 3), 3, 4, 5


def row_view(obs: dict) -> dict:
    """One row's observation (what the agent sees) in the viewer's format, as one step:
    the map, the agent's own units (owner 0, the viewer's side), the enemy's and the
    neutral ones it can see. A lost base's stand-in (no hit points) is not drawn."""
    g, ent, types = np.asarray(obs["glob"]), np.asarray(obs["ent"]), np.asarray(obs["ent_type"])
    map_id = int(np.argmax(g[OBS_MAP]))
    w, h, cells = duel_cells(map_id)
    units = []
    for e in range(int(obs["n_ent"])):
        f, t = ent[e], int(types[e])
        if f[OBS_HP] <= 0 or not 0 <= t < len(DUEL_TYPES):
            continue
        units.append(dict(id=e, type=t, owner=int(np.argmax(f[OBS_OWNER])), x=round(float(f[OBS_X]) * w, 3),
                          y=round(float(f[OBS_Y]) * h, 3), hp=round(float(f[OBS_HP]) * DUEL_TYPES[t][2])))
    return dict(map=dict(w=w, h=h, cells=cells, name=str(map_id)), side=0,
                types=[dict(name=n, sight=s, hp=hp) for n, s, hp in DUEL_TYPES], owners=["agent", "enemy", "neutral"],
                orders=DUEL_ORDERS, steps=[dict(units=units)], meta=dict(game="duel"))
