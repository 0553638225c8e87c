"""A game's spaces for one agent row, from its GameSpec.

The observation is a Dict of the row's fields as the table has them (docs/protocol.md):
`glob` the global features, `ent` the entities (E_MAX of them, zero past `n_ent`),
`ent_type` their type ids (0 past `n_ent`), `n_ent` the count, and `mask` the allowed
choices per head (1 allowed; a head's choices past its size are always 0). The action
is one choice per head: MultiDiscrete(head_sizes).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from w3async.games.spec import GameSpec
from w3async.runtime.policies import sample_masked  # noqa: F401 (the env's users' random policy)
from w3async.sync import layout

OBS_KEYS = ("glob", "ent", "ent_type", "n_ent", "mask")


def observation_space(spec: GameSpec, seed: int | None = None) -> spaces.Dict:
    return spaces.Dict({
        "glob": spaces.Box(-np.inf, np.inf, (layout.G_GLOB,), np.float32),
        "ent": spaces.Box(-np.inf, np.inf, (layout.E_MAX, layout.F_ENT), np.float32),
        "ent_type": spaces.Box(0, spec.n_types - 1, (layout.E_MAX,), np.int16),
        "n_ent": spaces.Discrete(layout.E_MAX + 1),
        "mask": spaces.Box(0, 1, (layout.N_HEADS, layout.HEAD_MAX), np.uint8),
    }, seed=seed)


def action_space(spec: GameSpec, seed: int | None = None) -> spaces.MultiDiscrete:
    return spaces.MultiDiscrete(np.array(spec.head_sizes, np.int64), seed=seed)
