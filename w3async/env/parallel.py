"""`W3ParallelEnv`: a recipe's agent sides as a PettingZoo ParallelEnv.

Agent `player_i` is table row i (with one lane of two agent sides: player_0 and
player_1, the duel's self-play). The opponents that are not agents come from the
recipe as in any run: the duel's W3D_SIDES="agent,ai:easy" plays the built-in AI, and
the env has one agent a lane; or from `opponent=CHECKPOINT` (env/opponent.py), which
plays side 1 of each two-sided lane: the agents are then the side-0 rows, in order.

An episode is one game of every lane: an agent whose lane ended (terminated, or
truncated: a time limit, or its game restarted) leaves `agents`; when none is left,
reset() answers the ended lanes and returns their next games' first observations.
A game process steps all its lanes together, so every group must have `lanes = 1`
(a lane that ended would hold its neighbours' steps until the reset).
"""

from __future__ import annotations

import functools

import numpy as np
from pettingzoo import ParallelEnv

from w3async.env import spaces as sp
from w3async.env.run import EnvRun, env_recipe


class W3ParallelEnv(ParallelEnv):
    metadata = {"name": "w3async", "render_modes": [], "is_parallelizable": True}

    def __init__(self, recipe, *, run_dir=None, keep_run: bool = False, step_timeout_s: float | None = None,
                 opponent=None, opponent_greedy: bool = False):
        many = [f"games[{i}] lanes={g.lanes}" for i, g in enumerate(recipe.games) if g.lanes != 1]
        if many:
            raise ValueError(f"{recipe.path}: {', '.join(many)}: a ParallelEnv needs lanes = 1 in every group "
                             f"(a game process steps its lanes together); set games.lanes=1 and raise games.count")
        self.run = EnvRun(recipe, run_dir, keep_run, opponent, opponent_greedy)
        self.recipe = self.run.recipe
        self._rows = self.run.rows  # agent i is table row _rows[i] (all rows, less an opponent's)
        self.possible_agents = [f"player_{i}" for i in range(len(self._rows))]
        self._row = {a: int(r) for a, r in zip(self.possible_agents, self._rows)}
        self._agent_of = {r: a for a, r in self._row.items()}
        self.agents: list[str] = []
        self.step_timeout_s = step_timeout_s
        self._obs_space = sp.observation_space(self.run.spec)
        self._act_space = sp.action_space(self.run.spec)
        self._started = False

    @functools.lru_cache(maxsize=None)  # noqa: B019 (one space per agent, kept for the env's life)
    def observation_space(self, agent):
        return self._obs_space

    @functools.lru_cache(maxsize=None)  # noqa: B019
    def action_space(self, agent):
        return self._act_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        rows = self._rows
        if seed is not None:
            self._act_space.seed(seed)
        if not self._started:
            self.run.start(seed)
            self._started = True
        elif seed is not None or any(a in self.agents for a in self.possible_agents):
            self.run.restart_games(self.step_timeout_s, seed)  # lanes still playing, or new seeds: restart
        else:  # every lane ended: answer its end, its next game's first rows follow
            self.run.bridge.give(rows, np.zeros((len(rows), len(self.run.spec.head_sizes)), np.int64))
        self.run.wait_rows(rows, self.step_timeout_s)
        with self.run.bridge.lock:
            obs, st = self.run.take(rows)
        self.agents = list(self.possible_agents)
        return self._split(sp.to_space(self.run.spec, obs), rows), {a: self._info(st, k) for k, a in enumerate(self.agents)}

    def step(self, actions: dict):
        if not self._started:
            raise RuntimeError("step() before reset(): call reset() first (it starts the run's games)")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"step(actions): no action for {', '.join(map(str, missing[:4]))}"
                             f"{' and more' if len(missing) > 4 else ''}: give one for every agent in env.agents")
        live = np.array([self._row[a] for a in self.agents], np.int64)
        heads = self.run.spec.head_sizes
        names = self.agents
        acts = (sp.checked_actions(np.stack([np.asarray(actions[a]).reshape(-1) for a in names]), len(live), heads,
                                lambda k: f"agent {names[k]}") if len(live) else np.zeros((0, len(heads)), np.int64))
        self.run.bridge.give(live, acts)
        self.run.wait_rows(live, self.step_timeout_s)
        with self.run.bridge.lock:
            obs, st = self.run.take(live)
        names = list(self.agents)
        out = (self._split(sp.to_space(self.run.spec, obs), live), {a: float(st["reward"][k]) for k, a in enumerate(names)},
               {a: bool(st["terminated"][k]) for k, a in enumerate(names)},
               {a: bool(st["truncated"][k]) for k, a in enumerate(names)},
               {a: self._info(st, k) for k, a in enumerate(names)})
        ended = st["terminated"] | st["truncated"]
        self.agents = [a for k, a in enumerate(names) if not ended[k]]
        return out

    def _split(self, obs, rows: np.ndarray) -> dict:
        if not isinstance(obs, dict):  # a Box: the globals of a row without entities
            return {self._agent_of[int(r)]: obs[i] for i, r in enumerate(rows)}
        return {self._agent_of[int(r)]: {k: (v[i] if k != "n_ent" else int(v[i])) for k, v in obs.items()}
                for i, r in enumerate(rows)}

    @staticmethod
    def _info(st: dict, k: int) -> dict:
        return {"cut": bool(st["cut"][k]), "episode_id": int(st["episode"][k]), "step": int(st["step"][k]),
                "slot": int(st["slot"][k]), "time_limit": bool(st["time_limit"][k])}

    def close(self):
        self.stats = self.run.close()


def parallel_env(recipe, *, sets=(), run_dir=None, keep_run: bool = False, step_timeout_s: float | None = None,
                 opponent=None, opponent_greedy: bool = False, **overrides) -> W3ParallelEnv:
    """A recipe's agent sides as a PettingZoo ParallelEnv (docs/env.md); arguments as make()'s."""
    return W3ParallelEnv(env_recipe(recipe, sets, **overrides), run_dir=run_dir, keep_run=keep_run,
                         step_timeout_s=step_timeout_s, opponent=opponent, opponent_greedy=opponent_greedy)
