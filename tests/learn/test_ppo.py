"""PPO's pure functions against values computed by hand."""

import math

import pytest
import torch

from w3async.learn import ppo


def t(*x):
    return torch.tensor(x, dtype=torch.float32)


def test_gae_without_episode_ends():
    # gamma = 0.5, lam = 0.5: gamma * lam = 0.25
    # deltas: 1 + 0.5*2 - 1 = 1 ; 0 + 0.5*3 - 2 = -0.5 ; 2 + 0.5*4 - 3 = 1
    # A2 = 1 ; A1 = -0.5 + 0.25*1 = -0.25 ; A0 = 1 + 0.25*-0.25 = 0.9375
    adv, ret = ppo.gae(t(1, 0, 2), t(1, 2, 3), t(2, 3, 4), t(0, 0, 0), t(0, 0, 0), 0.5, 0.5)
    assert torch.allclose(adv, t(0.9375, -0.25, 1.0))
    assert torch.allclose(ret, adv + t(1, 2, 3))


def test_gae_done_does_not_bootstrap_or_flow_back():
    # done at t=1: delta1 = 0 + 0 - 2 = -2, and A1 does not see A2.
    # delta0 = 1 + 0.5*2 - 1 = 1 ; delta2 = 2 + 0.5*4 - 3 = 1
    # A2 = 1 ; A1 = -2 ; A0 = 1 + 0.25 * -2 = 0.5
    adv, _ = ppo.gae(t(1, 0, 2), t(1, 2, 3), t(2, 3, 4), t(0, 1, 0), t(0, 0, 0), 0.5, 0.5)
    assert torch.allclose(adv, t(0.5, -2.0, 1.0))


def test_gae_truncated_bootstraps_but_does_not_flow_back():
    # truncated at t=1 (next value 3 is the last observation's): delta1 = 0 + 0.5*3 - 2 = -0.5
    # A2 = 1 ; A1 = -0.5 (cut) ; A0 = 1 + 0.25 * -0.5 = 0.875
    adv, _ = ppo.gae(t(1, 0, 2), t(1, 2, 3), t(2, 3, 4), t(0, 0, 0), t(0, 1, 0), 0.5, 0.5)
    assert torch.allclose(adv, t(0.875, -0.5, 1.0))


def test_gae_batches_over_leading_axes():
    r = torch.stack([t(1, 0, 2), t(1, 0, 2)])
    v, nv = torch.stack([t(1, 2, 3)] * 2), torch.stack([t(2, 3, 4)] * 2)
    d = torch.stack([t(0, 0, 0), t(0, 1, 0)])
    adv, _ = ppo.gae(r, v, nv, d, torch.zeros(2, 3), 0.5, 0.5)
    assert torch.allclose(adv, torch.stack([t(0.9375, -0.25, 1.0), t(0.5, -2.0, 1.0)]))


def test_policy_loss_clips():
    old = torch.zeros(2)
    new = torch.log(t(1.5, 0.5))  # ratios 1.5, 0.5
    loss, kl, frac = ppo.policy_loss(new, old, t(1.0, -1.0), clip=0.2)
    # row 0: A=1: max(-1.5, -1.2) = -1.2 ; row 1: A=-1: max(0.5, 0.8) = 0.8 ; mean -0.2
    assert loss.item() == pytest.approx(-0.2)
    assert frac.item() == 1.0
    expect_kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
    assert kl.item() == pytest.approx(expect_kl, rel=1e-5)


def test_policy_loss_inside_the_clip_is_the_plain_surrogate():
    loss, _, frac = ppo.policy_loss(torch.log(t(1.1)), torch.zeros(1), t(2.0), clip=0.2)
    assert loss.item() == pytest.approx(-2.2)
    assert frac.item() == 0.0


def test_value_loss_clipped_and_plain():
    # V_old = 1, V = 2, R = 3, clip 0.5: unclipped (2-3)^2 = 1, clipped 1.5 -> (1.5-3)^2 = 2.25
    assert ppo.value_loss(t(2), t(1), t(3), 0.5).item() == pytest.approx(0.5 * 2.25)
    assert ppo.value_loss(t(2), t(1), t(3), None).item() == pytest.approx(0.5)


def test_normalize_and_total():
    a = ppo.normalize_advantages(t(1, 2, 3))
    assert torch.allclose(a, t(-1, 0, 1) / math.sqrt(2 / 3), atol=1e-6)
    assert ppo.entropy_bonus(t(1, 3)).item() == 2.0
    assert ppo.total_loss(t(1.0), t(2.0), t(3.0), vf_coef=0.5, ent_coef=0.1).item() == pytest.approx(1.7)
