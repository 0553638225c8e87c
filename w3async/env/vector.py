"""`W3VectorEnv`: a recipe's agent rows as a gymnasium.vector.VectorEnv, and the
EnvPool-style `send`/`recv` over the same rows.

Sub-environment i is table row i: every agent side of every lane of every game process
of the recipe, in the recipe's order (group, process, lane, side). Autoreset is
NEXT_STEP, which is what the games do: a lane posts its terminal observation (DONE, or
TRUNCATED) and waits for an answer it ignores, then posts the first observation of the
next episode. So the step after a terminated/truncated one ignores its action for that
sub-env and returns the new episode's first observation, with reward 0.

A game that ends mid-episode (killed, crashed, hung, a bad row: the supervisor restarts
it) ends its rows' episodes as truncated, once, with their last observation and reward
0, and `infos["cut"]` True; the next step gives the restarted game's first observation.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from w3async.env import spaces as sp
from w3async.env.render import Renderer, check_mode, modes_of
from w3async.env.run import EnvRun, env_recipe


# infos' keys and the row fields they come from: the episode's id is "episode_id", so that
# gymnasium's RecordEpisodeStatistics (and CleanRL's logging after it) may write "episode".
INFO_KEYS = {"cut": "cut", "episode_id": "episode", "step": "step", "slot": "slot",
             "time_limit": "time_limit"}


class EpisodeTally:
    """Each sub-env's return and length so far, and the episodes a step ended in the
    form gymnasium 0.29's vector envs gave them: `infos["final_info"]`, one entry a
    sub-env of the step, the ended ones' a dict with `episode` ({"r", "l", "t"}: return,
    length, seconds since its start) and the others' None, beside its mask
    `infos["_final_info"]`; present only in a step where an episode ended. CleanRL's
    `ppo.py` reads it as it is (`for info in infos["final_info"]: if info and "episode"
    in info`). With NEXT_STEP autoreset the step after an end is the next episode's first
    observation: not counted (reward 0, length 0)."""

    def __init__(self, n: int):
        self.ret = np.zeros(n, np.float64)
        self.length = np.zeros(n, np.int64)
        self.t0 = np.zeros(n, np.float64)
        self.fresh = np.ones(n, bool)  # the next step of this sub-env is its episode's first observation

    def start(self, ids: np.ndarray) -> None:
        self.ret[ids], self.length[ids], self.t0[ids], self.fresh[ids] = 0.0, 0, time.perf_counter(), False

    def step(self, ids: np.ndarray, reward: np.ndarray, done: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        fresh = self.fresh[ids]
        if fresh.any():  # the step after an end: its sub-envs start anew, uncounted
            self.start(ids[fresh])
            live = ~fresh
            self.ret[ids[live]] += reward[live]
            self.length[ids[live]] += 1
            ends = live & done
        else:  # most steps: every sub-env counted, a few numpy calls
            self.ret[ids] += reward
            self.length[ids] += 1
            ends = done
        if not ends.any():
            return None
        self.fresh[ids[ends]] = True
        final = np.full(len(ids), None, object)
        now = time.perf_counter()
        for k in np.flatnonzero(ends):
            e = ids[k]
            final[k] = {"episode": {"r": np.float32(self.ret[e]), "l": np.int32(self.length[e]),
                                    "t": round(now - self.t0[e], 6)}}
        return final, ends.copy()


class W3VectorEnv(VectorEnv):
    """The recipe's games as a vector env (make() builds it; close() ends the run)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, recipe, *, run_dir=None, keep_run: bool = False, batch_size: int | None = None,
                 step_timeout_s: float | None = None, opponent=None, opponent_greedy: bool = False,
                 render_mode: str | None = None):
        game = check_mode(render_mode, recipe.game)  # before any game starts
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_modes": modes_of(recipe.game)}
        self.run = EnvRun(recipe, run_dir, keep_run, opponent, opponent_greedy)
        self.recipe = self.run.recipe
        self.spec_ = self.run.spec
        self._rows = self.run.rows  # sub-env i is table row _rows[i] (all rows, less an opponent's)
        self._env_of = np.full(int(self._rows.max()) + 1 if len(self._rows) else 0, -1, np.int64)
        self._env_of[self._rows] = np.arange(len(self._rows))
        self.num_envs = len(self._rows)
        self.single_observation_space = sp.observation_space(self.spec_)
        self.single_action_space = sp.action_space(self.spec_)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.batch_size = batch_size or self.num_envs
        if not 1 <= self.batch_size <= self.num_envs:
            raise ValueError(f"batch_size={batch_size}: must be 1..{self.num_envs} (the recipe's agent rows)")
        self.step_timeout_s = step_timeout_s
        self._all = np.arange(self.num_envs)
        self._all_ready = None  # step()'s check that every row is ready (made at the first step)
        self._started = False
        self.closed = False
        self._renderer = Renderer(game, self.num_envs) if game else None
        self.last_mask: np.ndarray | None = None
        self._tally = EpisodeTally(self.num_envs)

    # ---- gymnasium.vector.VectorEnv --------------------------------------------------------

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        """The first observation of every row. The first call starts the run; a later one
        ends every game and restarts it (not counted in the restart budget). `seed` seeds
        the games (each game's W3S_SEED: an int gives game i seed + i * 1000003, a list one
        per sub-env gives each game its first row's) and the spaces' sampling: the same
        seed and actions give the same episodes. None: a new seed at every start."""
        if seed is not None:
            s = seed if isinstance(seed, int) else next((x for x in seed if x is not None), None)
            if s is not None:
                self.single_action_space.seed(s)
                self.action_space.seed(s)
                self.observation_space.seed(s)
            if not isinstance(seed, int) and len(seed) != self.num_envs:
                raise ValueError(f"reset(seed=) with {len(seed)} seeds: one per sub-env ({self.num_envs}), or an int")
        if seed is not None and not isinstance(seed, int):  # one per sub-env: per table row
            per_row = [None] * (int(self._rows.max()) + 1)
            for i, r in enumerate(self._rows):
                per_row[r] = seed[i]
            seed = per_row
        if not self._started:
            self.run.start(seed)
            self._started = True
        else:
            self.run.restart_games(self.step_timeout_s, seed)
        self.run.wait_rows(self._rows, self.step_timeout_s)
        with self.run.bridge.lock:
            obs, st = self.run.take(self._rows)
        self._tally.start(self._all)
        self._seen(obs, self._all, st)
        return sp.to_space(self.spec_, obs), self._infos(st)

    def step(self, actions):
        self._need_reset("step()")
        b = self.run.bridge
        if self._all_ready is None:
            self._all_ready = self.run.all_ready(self._rows)
        b.give(self._rows, self._actions(actions, self.num_envs))
        b.wait(self._all_ready, self.step_timeout_s)
        with b.lock:
            obs, st = b.take(self._rows)
        self._seen(obs, self._all, st)
        return sp.to_space(self.spec_, obs), st["reward"], st["terminated"], st["truncated"], self._infos(st, self._all, True)

    def render(self) -> tuple | None:
        """With render_mode="rgb_array": each sub-env's last observation as the game's
        viewer draws it, an (H, W, 3) uint8 frame (None for one not yet seen); else None."""
        return self._renderer.frames() if self._renderer else None

    def _seen(self, obs: dict, ids: np.ndarray, st: dict) -> None:
        self.last_mask = obs["mask"]  # the rows just returned: their allowed choices (action_masks)
        if self._renderer:
            self._renderer.remember(obs, ids, st["step"])

    def close_extras(self, **kwargs: Any) -> None:
        self.stats = self.run.close()

    # ---- EnvPool-style -------------------------------------------------------------------

    def send(self, actions, env_ids=None) -> None:
        """Answer these sub-envs (default: all) with these actions, one row of
        `len(head_sizes)` choices each. Returns at once."""
        self._need_reset("send()")
        ids = self._all if env_ids is None else np.asarray(env_ids, np.int64)
        self.run.bridge.give(self._rows[ids], self._actions(actions, len(ids), ids))

    def _need_reset(self, call: str) -> None:
        if not self._started:
            raise RuntimeError(f"{call} before reset(): call reset() first (it starts the run's games)")

    def _actions(self, actions, n: int, ids: np.ndarray | None = None) -> np.ndarray:
        ids = self._all if ids is None else ids
        return sp.checked_actions(actions, n, self.spec_.head_sizes, lambda k: f"env id {int(ids[k])}")

    def recv(self, timeout_s: float | None = None):
        """The next `batch_size` sub-envs that are ready, oldest first: (obs, rewards,
        terminations, truncations, infos), infos["env_id"] their ids."""
        self._need_reset("recv()")
        b = self.run.bridge
        b.wait(lambda: b.copies.ready() >= self.batch_size, timeout_s or self.step_timeout_s)
        with b.lock:
            ready = b.ready()
            rows = ready[np.argsort(b.stamp[ready], kind="stable")[: self.batch_size]]
            obs, st = self.run.take(rows)
        self._seen(obs, self._env_of[rows], st)
        return sp.to_space(self.spec_, obs), st["reward"], st["terminated"], st["truncated"], self._infos(st, self._env_of[rows], True)

    def recv_rows(self, env_ids, timeout_s: float | None = None):
        """The next step of exactly these sub-envs (each sent an action, or just ended),
        waiting for all of them."""
        ids = np.asarray(env_ids, np.int64)
        rows = self._rows[ids]
        self.run.wait_rows(rows, timeout_s or self.step_timeout_s)
        with self.run.bridge.lock:
            obs, st = self.run.take(rows)
        self._seen(obs, ids, st)
        return sp.to_space(self.spec_, obs), st["reward"], st["terminated"], st["truncated"], self._infos(st, ids, True)

    def _infos(self, st: dict, ids: np.ndarray | None = None, stepped: bool = False) -> dict:
        info = {k: st[s] for k, s in INFO_KEYS.items()}
        if ids is not None:
            info["env_id"] = ids.astype(np.int64)
        every = np.empty((len(info), len(st["cut"])), bool)  # every "_key" mask: rows of one array
        every.fill(True)  # (np.ones is Python code around these two calls)
        for i, k in enumerate(list(info)):
            info["_" + k] = every[i]
        if stepped:
            ended = self._tally.step(ids, st["reward"], st["terminated"] | st["truncated"])
            if ended is not None:
                info["final_info"], info["_final_info"] = ended
        return info

    @property
    def restarts_seen(self) -> int:
        """Rows whose episode a game's end cut so far."""
        return self.run.bridge.restarts if self.run.bridge else 0


def make(recipe, *, sets=(), run_dir=None, keep_run: bool = False, batch_size: int | None = None,
         step_timeout_s: float | None = None, opponent=None, opponent_greedy: bool = False,
         render_mode: str | None = None, **overrides) -> W3VectorEnv:
    """A recipe's games as a gymnasium VectorEnv (docs/env.md). `recipe`: a name in
    recipes/ ("env-duel"), a path, or a Recipe; `sets` and keywords override its keys
    (`games__count=2` is `--set games.count=2`). `opponent`: a checkpoint (file or run
    folder) that plays side 1 of every two-sided group (env/opponent.py); the sub-envs are
    then the other rows. `render_mode="rgb_array"`: render() draws each sub-env's last
    observation (a game with a Game.row_view, e.g. the duel)."""
    return W3VectorEnv(env_recipe(recipe, sets, **overrides), run_dir=run_dir, keep_run=keep_run,
                       batch_size=batch_size, step_timeout_s=step_timeout_s, opponent=opponent,
                       opponent_greedy=opponent_greedy, render_mode=render_mode)
