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


def checked_actions(actions, n: int, head_sizes, who) -> np.ndarray:
    """actions as an (n, heads) int64 array, each a choice of its head: a ValueError names
    who(k) (the k-th action's env id or agent), the head and the value of the first that
    is not (999, -1, NaN, 2.5: the game would get a choice past its head, or a float cut
    to one). Costs a comparison per action when all is well."""
    a = np.asarray(actions)
    heads = len(head_sizes)
    if a.shape != (n, heads):
        raise ValueError(f"actions of shape {a.shape}: expected ({n}, {heads}), one choice per action head for each "
                         f"env id")
    if a.dtype.kind not in "iu":
        whole = a.dtype.kind in "fb" and np.isfinite(a.astype(np.float64)).all() and (a == np.round(a)).all()
        if not whole:
            bad = np.argwhere(~np.isfinite(a.astype(np.float64)) | (a != np.round(a)))
            k, h = (bad[0] if len(bad) else (0, 0))
            raise ValueError(f"actions: {who(int(k))}, head {int(h)}: {float(a[k, h])!r} is not a whole number "
                             f"(choices are integers 0..n-1 of each head)")
        a = a.astype(np.int64)
    sizes = np.asarray(head_sizes, np.int64)
    out = (a < 0) | (a >= sizes)
    if out.any():
        k, h = np.argwhere(out)[0]
        raise ValueError(f"actions: {who(int(k))}, head {int(h)}: {int(a[k, h])} is outside 0..{int(sizes[h]) - 1} "
                         f"(the head's action space, Discrete({int(sizes[h])}))")
    return a.astype(np.int64, copy=False)


def flat_masks(mask: np.ndarray, head_sizes) -> np.ndarray:
    """A row's (..., heads, HEAD_MAX) masks as one flat bool vector per row: each head's
    first `size` choices, heads in order; what sb3-contrib's MaskablePPO takes for a
    MultiDiscrete(head_sizes) action (`action_masks()`)."""
    m = np.asarray(mask).astype(bool, copy=False)
    return np.concatenate([m[..., h, :n] for h, n in enumerate(head_sizes)], axis=-1)

