"""Stable-Baselines3's PPO on the same env (w3async.env.make("env-duel")), through a
small VecEnv adapter; with --maskable, sb3-contrib's MaskablePPO, which takes the game's
masks from the adapter's action_masks().

    .venv/bin/pip install -e '.[examples]'     # stable-baselines3, sb3-contrib; torch 2.13 satisfies them
    .venv/bin/python examples/sb3_duel.py --timesteps 20000 [--maskable]
    .venv/bin/python examples/sb3_duel.py --maskable --minutes 30 --csv curve.csv \
        --tensorboard runs/sb3 --save runs/sb3/model.zip

    .venv/bin/python -m w3async eval runs/sb3/model.zip --policy examples/sb3_duel.py:eval_policy \
        --recipe env-duel --games 100                # the saved model against every level

--minutes stops the learning at that wall time (--timesteps is then only a ceiling);
--csv writes the win rate against ai:easy over the last 100 finished games after every
rollout; --tensorboard is SB3's own log folder (rollout/ep_rew_mean, train/...); --save
the model, SB3's zip (MaskablePPO.load reads it).

Each ended episode's info has SB3's Monitor record, {"r": return, "l": length, "t":
seconds since the start}, so SB3's logger shows rollout/ep_rew_mean and ep_len_mean.

SB3's VecEnv resets a sub-env in the step that ends it (the terminal observation in
info["terminal_observation"]); w3async.env's autoreset is NEXT_STEP, so the adapter
takes the next step of an ended sub-env at once (its action ignored by the game) and
returns that first observation (so every process runs one lane: a process posts
only when all its rows are answered). SB3's PPO does not mask actions: an order the mask
forbids is discarded by the game (counted in the row's `discarded`), not an error.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import w3async.env as we  # noqa: E402
from w3async import games  # noqa: E402
from w3async.env.spaces import flat_masks  # noqa: E402


class W3SB3VecEnv(VecEnv):
    """A W3VectorEnv as SB3's VecEnv (autoreset in the same step)."""

    def __init__(self, env: we.W3VectorEnv):
        self.env = env
        self.game = games.get(env.recipe.game)
        self.genv = env.recipe.games[0].env
        self.results: list[tuple[str, bool]] = []  # (win/loss/draw, at the time limit) a finished game
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self._actions = None
        self._obs = None
        self._ret = np.zeros(env.num_envs)
        self._len = np.zeros(env.num_envs, np.int64)
        self._t0 = time.monotonic()

    def reset(self):
        obs, _ = self.env.reset()
        self._obs = obs
        return obs

    def action_masks(self) -> np.ndarray:
        """(num_envs, sum(head sizes)) bools: what MaskablePPO samples under."""
        return flat_masks(self._obs["mask"], self.env.single_action_space.nvec)

    def step_async(self, actions):
        self._actions = np.asarray(actions, np.int64)

    def step_wait(self):
        obs, rew, term, trunc, info = self.env.step(self._actions)
        self._ret += rew
        self._len += 1
        ended = np.flatnonzero(term | trunc)
        infos = [{} for _ in range(self.num_envs)]
        if len(ended):
            for i in ended:
                infos[i]["terminal_observation"] = {k: v[i] for k, v in obs.items()}
                infos[i]["TimeLimit.truncated"] = bool(trunc[i])
                infos[i]["episode"] = {"r": float(self._ret[i]), "l": int(self._len[i]),
                                       "t": round(time.monotonic() - self._t0, 6)}  # SB3's Monitor record
                self._ret[i], self._len[i] = 0.0, 0
                if term[i]:
                    self.results.append((self.game.result_of(float(rew[i]), self.genv), bool(info["time_limit"][i])))
            zeros = np.zeros((len(ended), len(self.env.single_action_space.nvec)), np.int64)
            self.env.send(zeros, ended)  # the autoreset step: the game's next episode
            first, *_ = self.env.recv_rows(ended)
            for k in obs:
                obs[k][ended] = first[k]
        self._obs = obs
        return obs, rew, term | trunc, infos

    def close(self):
        self.env.close()

    def get_attr(self, attr_name, indices=None):
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name, value, indices=None):
        setattr(self, attr_name, value)

    def env_method(self, method_name, *args, indices=None, **kwargs):
        idx = list(self._get_indices(indices))
        if method_name == "action_masks":  # sb3-contrib's get_action_masks() asks each sub-env
            return list(self.action_masks()[idx])
        return [None] * len(idx)

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False] * len(self._get_indices(indices))

    def seed(self, seed=None):
        return [None] * self.num_envs


class Curve(BaseCallback):
    """After every rollout: the win rate over the last 100 finished games, and the part of
    them won decisively (the base destroyed, not the tie-break at the time limit), printed
    and written to the CSV (flushed: the curve survives a stopped run); stops the learning
    once `minutes` have passed."""

    def __init__(self, venv: W3SB3VecEnv, minutes: float, csv_path: str):
        super().__init__()
        self.venv, self.deadline, self.t0 = venv, time.monotonic() + 60 * minutes, time.monotonic()
        self.file = open(csv_path, "w", newline="") if csv_path else None
        self.out = csv.writer(self.file) if self.file else None
        if self.out:
            self.out.writerow(["minutes", "agent_steps", "games", "win_rate_last100", "decisive_win_rate_last100"])

    def win_rate(self, decisive: bool = False) -> float:
        last = self.venv.results[-100:]
        return sum(r == "win" and not (decisive and tl) for r, tl in last) / len(last) if last else float("nan")

    def _on_step(self) -> bool:
        return time.monotonic() < self.deadline

    def _on_rollout_end(self) -> None:
        mins = (time.monotonic() - self.t0) / 60
        print(f"{mins:5.1f} min {self.num_timesteps} steps {len(self.venv.results)} games "
              f"win rate (last {min(len(self.venv.results), 100)}) {self.win_rate():.2f}, "
              f"decisive {self.win_rate(decisive=True):.2f}", flush=True)
        if self.out:
            self.out.writerow([f"{mins:.2f}", self.num_timesteps, len(self.venv.results), f"{self.win_rate():.3f}",
                               f"{self.win_rate(decisive=True):.3f}"])
            self.file.flush()


def saved_policy_module(model: str) -> str:
    """The module of the policy class a saved SB3 zip names (its "data" member, JSON):
    sb3_contrib.common.maskable.policies for a MaskablePPO's."""
    with zipfile.ZipFile(model) as z:
        return json.loads(z.read("data"))["policy_class"]["__module__"]


def eval_policy(model: str, spec):
    """For `python -m w3async eval MODEL.zip --policy examples/sb3_duel.py:eval_policy --recipe
    env-duel`: the saved model (PPO or MaskablePPO, whichever saved it) as a function from
    a batch of observations to actions, sampled; MaskablePPO's under the game's masks."""
    masked = saved_policy_module(model).startswith("sb3_contrib.common.maskable")
    if masked:
        from sb3_contrib import MaskablePPO  # noqa: PLC0415

        m = MaskablePPO.load(model, device="cpu")
    else:
        m = PPO.load(model, device="cpu")
    nvec = np.asarray(spec.head_sizes)

    def act(obs):
        if masked:
            return m.predict(obs, action_masks=flat_masks(obs["mask"], nvec), deterministic=False)[0]
        return m.predict(obs, deterministic=False)[0]

    return act


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--recipe", default="env-duel")
    p.add_argument("--timesteps", type=int, default=20000)
    p.add_argument("--maskable", action="store_true", help="sb3-contrib's MaskablePPO, under the game's masks")
    p.add_argument("--minutes", type=float, default=0.0, help="stop after this many minutes (0: --timesteps only)")
    p.add_argument("--csv", default="", help="the win-rate curve, a row per rollout")
    p.add_argument("--tensorboard", default="", help="SB3's TensorBoard log folder")
    p.add_argument("--save", default="", help="where the trained model is saved (SB3's zip)")
    a = p.parse_args()
    th.set_num_threads(1)  # this machine's cores are shared; more threads only contend
    # one lane a process: the adapter's extra step of an ended sub-env must not wait on
    # the other lanes of its process (a process posts when all its rows are answered)
    venv = W3SB3VecEnv(we.make(a.recipe, games__count=8, games__lanes=1, supervisor__progress_s=0))
    algo = PPO
    if a.maskable:
        from sb3_contrib import MaskablePPO  # noqa: PLC0415 (only with --maskable)

        algo = MaskablePPO
    model = algo("MultiInputPolicy", venv, n_steps=128, batch_size=256, learning_rate=3e-4, verbose=0, device="cpu",
                 tensorboard_log=a.tensorboard or None)
    curve = Curve(venv, a.minutes or float("inf"), a.csv)
    t0 = time.monotonic()
    model.learn(total_timesteps=a.timesteps if not a.minutes else max(a.timesteps, 10**9), callback=curve)
    print(f"sb3 {algo.__name__}: {model.num_timesteps} steps in {time.monotonic() - t0:.0f} s, {len(venv.results)} "
          f"games, win rate (last {min(len(venv.results), 100)}) {curve.win_rate():.2f}, "
          f"decisive {curve.win_rate(decisive=True):.2f}")
    if a.save:
        model.save(a.save)
        print(f"saved {a.save}")
    venv.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
