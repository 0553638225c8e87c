"""A game's spaces for one agent row, exactly as its GameSpec declares them.

A row with entities: a Dict of the row's fields as the table has them (docs/protocol.md):
`glob` the global features (absent when the spec declares none), `ent` the entities
(e_max of them, zero past `n_ent`), `ent_type` their type ids (0 past `n_ent`), `n_ent`
the count, and `mask` the allowed choices per head (1 allowed; a head's choices past its
size are always 0). A row without entities (`entities = 0`): a Box of its globals, the
masks through the env's action_masks(). The action: Discrete(n) for one head,
MultiDiscrete(head_sizes) for several.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from w3async.games.spec import GameSpec
from w3async.runtime.policies import sample_masked  # noqa: F401 (the env's users' random policy)

OBS_KEYS = ("glob", "ent", "ent_type", "n_ent", "mask")


def observation_space(spec: GameSpec, seed: int | None = None) -> spaces.Dict | spaces.Box:
    lay = spec.layout
    if lay.e_max == 0:
        return spaces.Box(-np.inf, np.inf, (lay.g_glob,), np.float32, seed=seed)
    fields = {"glob": spaces.Box(-np.inf, np.inf, (lay.g_glob,), np.float32)} if lay.g_glob else {}
    return spaces.Dict(fields | {
        "ent": spaces.Box(-np.inf, np.inf, (lay.e_max, lay.f_ent), np.float32),
        "ent_type": spaces.Box(0, spec.n_types - 1, (lay.e_max,), np.int16),
        "n_ent": spaces.Discrete(lay.e_max + 1),
        "mask": spaces.Box(0, 1, (lay.n_heads, lay.head_max), np.uint8),
    }, seed=seed)


def action_space(spec: GameSpec, seed: int | None = None) -> spaces.MultiDiscrete | spaces.Discrete:
    if len(spec.head_sizes) == 1:
        return spaces.Discrete(spec.head_sizes[0], seed=seed)
    return spaces.MultiDiscrete(np.array(spec.head_sizes, np.int64), seed=seed)


def to_space(spec: GameSpec, obs: dict):
    """A batch of rows' observations (the row copies' dict: glob, ent, ent_type, n_ent,
    mask) as observation_space has them: the globals alone for a row without entities,
    the dict without `glob` for one without globals."""
    lay = spec.layout
    if lay.e_max == 0:
        return obs["glob"]
    return obs if lay.g_glob else {k: v for k, v in obs.items() if k != "glob"}


def checked_actions(actions, n: int, head_sizes, who) -> np.ndarray:
    """actions as an (n, heads) int64 array, each a choice of its head: a ValueError names
    who(k) (the k-th action's env id or agent), the head and the value of the first that
    is not (999, -1, NaN, 2.5: the game would get a choice past its head, or a float cut
    to one). Costs a comparison per action when all is well."""
    a = np.asarray(actions)
    heads = len(head_sizes)
    if heads == 1 and a.shape == (n,):  # Discrete: one choice per env id
        a = a.reshape(n, 1)
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
    """A row's (..., heads, head_max) masks as one flat bool vector per row: each head's
    first `size` choices, heads in order; what sb3-contrib's MaskablePPO takes for a
    MultiDiscrete(head_sizes) action (`action_masks()`)."""
    m = np.asarray(mask).astype(bool, copy=False)
    return np.concatenate([m[..., h, :n] for h, n in enumerate(head_sizes)], axis=-1)

