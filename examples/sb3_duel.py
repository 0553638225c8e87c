"""Stable-Baselines3's PPO on the same env (w3async.env.make("env-duel")), through a
small VecEnv adapter.

    .venv/bin/pip install -e '.[examples]'     # stable-baselines3; torch 2.13 already satisfies it
    .venv/bin/python examples/sb3_duel.py --timesteps 20000

SB3's VecEnv resets a sub-env in the step that ends it (the terminal observation in
info["terminal_observation"]); w3async.env's autoreset is NEXT_STEP, so the adapter
takes the next step of an ended sub-env at once (its action ignored by the game) and
returns that first observation (so every process runs one lane: a process posts
only when all its rows are answered). SB3's PPO does not mask actions: an order the mask
forbids is discarded by the game (counted in the row's `discarded`), not an error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecEnv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import w3async.env as we  # noqa: E402
from w3async import games  # noqa: E402


class W3SB3VecEnv(VecEnv):
    """A W3VectorEnv as SB3's VecEnv (autoreset in the same step)."""

    def __init__(self, env: we.W3VectorEnv):
        self.env = env
        self.game = games.get(env.recipe.game)
        self.genv = env.recipe.games[0].env
        self.results: list[str] = []
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self._actions = None

    def reset(self):
        obs, _ = self.env.reset()
        return obs

    def step_async(self, actions):
        self._actions = np.asarray(actions, np.int64)

    def step_wait(self):
        obs, rew, term, trunc, info = self.env.step(self._actions)
        ended = np.flatnonzero(term | trunc)
        infos = [{} for _ in range(self.num_envs)]
        if len(ended):
            for i in ended:
                infos[i]["terminal_observation"] = {k: v[i] for k, v in obs.items()}
                infos[i]["TimeLimit.truncated"] = bool(trunc[i])
                if term[i]:
                    self.results.append(self.game.result_of(float(rew[i]), self.genv))
            zeros = np.zeros((len(ended), len(self.env.single_action_space.nvec)), np.int64)
            self.env.send(zeros, ended)  # the autoreset step: the game's next episode
            first, *_ = self.env.recv_rows(ended)
            for k in obs:
                obs[k][ended] = first[k]
        return obs, rew, term | trunc, infos

    def close(self):
        self.env.close()

    def get_attr(self, attr_name, indices=None):
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name, value, indices=None):
        setattr(self, attr_name, value)

    def env_method(self, method_name, *args, indices=None, **kwargs):
        return [None] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * len(self._get_indices(indices))

    def seed(self, seed=None):
        return [None] * self.num_envs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", default="env-duel")
    p.add_argument("--timesteps", type=int, default=20000)
    a = p.parse_args()
    th.set_num_threads(1)  # this machine's cores are shared; more threads only contend
    # one lane a process: the adapter's extra step of an ended sub-env must not wait on
    # the other lanes of its process (a process posts when all its rows are answered)
    venv = W3SB3VecEnv(we.make(a.recipe, games__count=8, games__lanes=1, supervisor__progress_s=0))
    model = PPO("MultiInputPolicy", venv, n_steps=128, batch_size=256, learning_rate=3e-4, verbose=0, device="cpu")
    t0 = time.monotonic()
    model.learn(total_timesteps=a.timesteps)
    last = venv.results[-100:]
    print(f"sb3 PPO: {a.timesteps} steps in {time.monotonic() - t0:.0f} s, {len(venv.results)} games, "
          f"win rate (last {len(last)}) {sum(r == 'win' for r in last) / max(len(last), 1):.2f}")
    venv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
