"""`GameEnv`: one game process as a plain gymnasium.Env, for code that wants one env a
game (gymnasium's AsyncVectorEnv over several: bench/env_bench.py) and for gymnasium's
single-env checkers.

The recipe is made to run one process of one lane; its agent rows (one for the duel
against an AI, two for the null game's two sides) are the env's. With one row the spaces
are the row's (w3async.env.spaces); with several they are batched and the reward is
their sum. A reset after an episode's end is the game's own: its ended lane's answer,
then the next episode's first step (no process restart); the first reset starts the run,
and a reset with a seed restarts the game with that seed (same seed, same actions: the
same episode). render_mode="rgb_array": render() draws the last observation with the
game's viewer (the duel). `action_masks()` gives the allowed choices of the last observation as
sb3-contrib's MaskablePPO wants them.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from w3async.env.spaces import flat_masks
from w3async.env.vector import make


class GameEnv(gym.Env):
    # what the class can do (gymnasium.make checks it before an env exists); an instance's
    # are its game's (render_modes is [] for a game without a view of an observation)
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, recipe, sets=(), render_mode: str | None = None, **overrides):
        self.env = make(recipe, sets=[*sets, "games.count=1", "games.lanes=1"], render_mode=render_mode, **overrides)
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_modes": self.env.metadata["render_modes"]}
        k = self.env.num_envs
        self.observation_space = self.env.observation_space if k > 1 else self.env.single_observation_space
        self.action_space = self.env.action_space if k > 1 else self.env.single_action_space
        self._k, self._started = k, False
        self._sizes = self.env.spec_.head_sizes
        self._heads = len(self._sizes)
        self._mask = None  # the last observation's masks

    def action_masks(self) -> np.ndarray:
        """The last observation's allowed choices, flat: each head's choices in order (of
        each row, rows in order, with several), bool, sum(head_sizes) of them."""
        if self._mask is None:
            raise RuntimeError("action_masks() before reset(): call reset() first")
        return flat_masks(self._mask, self._sizes).reshape(-1)

    def _one(self, obs):
        self._mask = self.env.last_mask
        if self._k > 1:
            return obs
        if not isinstance(obs, dict):  # a Box: the globals of a row without entities
            return obs[0]
        return {key: (v[0] if key != "n_ent" else int(v[0])) for key, v in obs.items()}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if not self._started or seed is not None:  # a seed: the game restarts with it
            self._started = True
            obs, info = self.env.reset(seed=seed)
        else:
            obs, _, _, _, info = self.env.step(np.zeros((self._k, self._heads), np.int64))
        return self._one(obs), self._info(info)

    def step(self, action):
        obs, rew, term, trunc, info = self.env.step(np.asarray(action).reshape(self._k, self._heads))
        return self._one(obs), float(rew.sum()), bool(term.any()), bool(trunc.any()), self._info(info)

    def render(self):
        """With render_mode="rgb_array": the last observation (the first row's, with
        several) as the game's viewer draws it, an (H, W, 3) uint8 frame; else None."""
        frames = self.env.render()
        return frames[0] if frames else None

    def _info(self, info: dict) -> dict:
        return {k: (v if self._k > 1 else v[0]) for k, v in info.items() if not k.startswith("_")}

    def close(self):
        self.env.close()
