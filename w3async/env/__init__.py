"""Gymnasium and PettingZoo envs over the supervisor (docs/env.md).

    import w3async.env
    env = w3async.env.make("env-duel")          # a gymnasium.vector.VectorEnv: one sub-env per agent row
    obs, info = env.reset()
    obs, rew, term, trunc, info = env.step(env.action_space.sample())
    env.send(actions, env_ids); obs, rew, term, trunc, info = env.recv()   # EnvPool-style
    env.close()

    penv = w3async.env.parallel_env("env-duel-selfplay")   # a pettingzoo.ParallelEnv

Imports gymnasium (the `env` extra); nothing of the package imports this one.
"""

from w3async.env.bridge import EnvClosed, EnvInterrupted
from w3async.env.vector import W3VectorEnv, make


def parallel_env(recipe, **kw):
    """A pettingzoo ParallelEnv of the recipe's agent sides (w3async.env.parallel)."""
    from w3async.env.parallel import parallel_env as _make  # noqa: PLC0415 (pettingzoo only where used)

    return _make(recipe, **kw)


__all__ = ["EnvClosed", "EnvInterrupted", "W3VectorEnv", "make", "parallel_env"]
