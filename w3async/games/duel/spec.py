"""What the duel game (games/duel/) uses of the table: the network sizes itself from DUEL_SPEC.

Entity type ids (ent_type): 0 base, 1 melee, 2 ranged, 3 heavy, 4 creep, 5 boss.
Entity 0 is always the side's own base (zeroed once it is gone); then the side's army
by id, the enemy units it can see, the neutral units it can see (fog of war).

| ent feature | meaning                                   |
|-------------|-------------------------------------------|
| 0, 1, 2     | owner one-hot: own, enemy, neutral        |
| 3, 4        | x, y as a fraction of the map             |
| 5, 6        | hp / max hp, hp / 1000                    |
| 7           | attack cooldown / 40 turns                |
| 8-11        | order one-hot: idle, move, hold, retreat  |
| 12          | has a target                              |
| 13          | one of the side's units focuses it        |
| 14, 15      | Manhattan distance to own, enemy base (map fractions) |

| glob        | meaning                                   |
|-------------|-------------------------------------------|
| 0, 1        | gold / 500, supply / 30                   |
| 2           | game time / time limit                    |
| 3, 4, 5     | own base hp, enemy base hp (when seen), enemy base seen |
| 6, 7        | type in training / 3, turns left / 140    |
| 8-10, 11-13 | own, visible enemy melee/ranged/heavy / 10 |
| 14          | visible neutrals / 10                     |
| 15, 16      | own army value, visible enemy army value (gold / 1000) |
| 17-19       | map one-hot: open, choke, camps           |
| 20, 21      | side, turns per step / 20                 |
| 22-25       | damage dealt, taken, kill value, loss value (/ 1000) |
| 26-28       | can train melee, ranged, heavy            |
| 29          | entities / 160                            |
| 30, 31      | own base x, y                             |

Heads: 0 train (nothing, melee, ranged, heavy); 1 army command (0 keep, 1 hold,
2 retreat, 3+k attack-move to region k of a 6x6 grid); 2 group the command and focus
apply to (0 whole army, 1 melee, 2 ranged, 3 heavy); 3 focus fire: an entity index,
where 0 (the own base, never a legal target) means "no new focus". docs/duel.md has
the rules; masks allow only what the game carries out.
"""

from __future__ import annotations

from w3async.sync import layout
from w3async.games.spec import GameSpec

N_TYPES = 6
TYPE_NAMES = ("base", "melee", "ranged", "heavy", "creep", "boss")
N_REGIONS = 36
HEAD_SIZES = (4, 3 + N_REGIONS, 4, layout.E_MAX)

# "Change nothing": command 0 keeps the group's orders, focus 0 (the own base) is no new focus.
DUEL_SPEC = GameSpec("duel", n_types=N_TYPES, head_sizes=HEAD_SIZES, pointer_head=3, noop=(None, 0, None, 0))
