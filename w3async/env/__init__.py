"""Gymnasium and PettingZoo envs over the supervisor (docs/env.md).

    import w3async.env
    env = w3async.env.make("env-duel")          # a gymnasium.vector.VectorEnv: one sub-env per agent row
    obs, info = env.reset()
    obs, rew, term, trunc, info = env.step(env.action_space.sample())
    env.send(actions, env_ids); obs, rew, term, trunc, info = env.recv()   # EnvPool-style
    env.close()

    penv = w3async.env.parallel_env("env-duel-selfplay")   # a pettingzoo.ParallelEnv
    env = gymnasium.make("w3async/Duel-v0")      # one game as a gymnasium.Env (ENV_IDS)

Imports gymnasium (the `env` extra); nothing of the package imports this one.
"""

import gymnasium

from w3async.env.bridge import EnvClosed, EnvInterrupted
from w3async.env.vector import W3VectorEnv, make

ENV_IDS = {
    "w3async/Duel-v0": "env-duel",            # the duel against ai:easy, one side
    "w3async/DuelSelfplay-v0": "env-duel-selfplay",  # both sides of one duel: a batched row pair
    "w3async/Null-v0": "env-null",            # the null game: the harness alone
    "w3async/Pong-v0": "pong-injected",       # Pong under Wine, by injection (docs/hooking.md)
    "w3async/Snake-v0": "snake-injected",     # Snake under Wine, by injection
}
"""gymnasium ids of the shipped recipes: gymnasium.make(ID, **kw) is
w3async.env.single.GameEnv(recipe, **kw), one game process of one lane (keywords as
make()'s: `games__env__W3D_SIDES="agent,ai:hard"`, `sets=[...]`)."""

for _id, _recipe in ENV_IDS.items():
    if _id not in gymnasium.registry:  # a reload of this module registers nothing twice
        gymnasium.register(_id, entry_point="w3async.env.single:GameEnv", kwargs={"recipe": _recipe})


def parallel_env(recipe, **kw):
    """A pettingzoo ParallelEnv of the recipe's agent sides (w3async.env.parallel)."""
    from w3async.env.parallel import parallel_env as _make  # noqa: PLC0415 (pettingzoo only where used)

    return _make(recipe, **kw)


__all__ = ["ENV_IDS", "EnvClosed", "EnvInterrupted", "W3VectorEnv", "make", "parallel_env"]
