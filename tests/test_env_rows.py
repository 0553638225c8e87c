"""w3async.env's own copies of the rows (env/rowcopies.py): what a cut row reports, and
that the arrays handed to the caller are the caller's."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import w3async.env as we
from w3async.env.spaces import OBS_KEYS, sample_masked


@pytest.fixture(autouse=True)
def _built(null_native):
    return null_native


def test_a_cut_row_reports_the_last_observation_handed_out():
    """A game killed mid-episode: its rows' truncation carries the observation the step
    before handed out (the null game's glob moves with the step, the restarted game's
    first one is another), even though the caller scribbled over every array it got and
    the new game posted meanwhile."""
    env = we.make("env-null", sets=['games.env.W3N_EPISODE_STEPS="100000"'])
    try:
        obs, _ = env.reset()
        rng = np.random.default_rng(5)
        for _ in range(12):
            obs, *_ = env.step(sample_masked(obs["mask"], rng))
        slot = env.run.thread.sup.slots[1]
        mine = np.arange(slot.row0, slot.row0 + slot.nrows)
        os.kill(slot.proc.pid, signal.SIGKILL)
        cut_seen = np.zeros(env.num_envs, bool)
        for _ in range(200):
            before = {k: v.copy() for k, v in obs.items()}
            actions = sample_masked(obs["mask"], rng)
            for v in obs.values():
                v[...] = 7  # the caller's arrays: nothing the env keeps
            obs, rew, term, trunc, infos = env.step(actions)
            cut = infos["cut"]
            for k in OBS_KEYS:
                assert np.array_equal(obs[k][cut], before[k][cut]), k
            assert not np.array_equal(obs["glob"][~cut], before["glob"][~cut])
            cut_seen |= cut
            if cut_seen[mine].all():
                break
        assert cut_seen[mine].all() and not cut_seen[np.setdiff1d(np.arange(env.num_envs), mine)].any()
        obs, rew, term, trunc, infos = env.step(sample_masked(obs["mask"], rng))
        assert (infos["step"][mine] == 0).all() and not infos["cut"].any()
    finally:
        env.close()
