"""PPO's pieces as small pure functions (tensors in, tensors out).

The maths follows the PPO paper (Schulman et al. 2017, arXiv:1707.06347), GAE
(Schulman et al. 2016, arXiv:1506.02438) and CleanRL's ppo.py (vwxyzjn/cleanrl),
whose names these keep. tests/learn/test_ppo.py checks each against hand-computed values.

Time is the last axis everywhere here ((..., T)): the learner's sequences are (B, T).
"""

from __future__ import annotations

import torch
from torch import Tensor


def gae(
    rewards: Tensor, values: Tensor, next_values: Tensor, dones: Tensor, truncated: Tensor,
    gamma: float, lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation along the last axis; returns (advantages, returns).

    Step t saw an observation with value values[t], took an action, got rewards[t], and
    then either the episode went on (the next observation's value is next_values[t]),
    ended (dones[t]: terminal, nothing to bootstrap) or was cut (truncated[t]: the
    episode did not end, so bootstrap from next_values[t], the value of the last
    observation it reached). Either way the advantage does not flow back across the
    episode boundary:

        delta_t = r_t + gamma * V(s_{t+1}) * (1 - done_t) - V(s_t)
        A_t     = delta_t + gamma * lam * (1 - done_t) * (1 - truncated_t) * A_{t+1}

    (GAE paper eq. 16; CleanRL's loop with `nextnonterminal`, split in two so that a
    time limit is not treated as a terminal state: Pardo et al. 2018, arXiv:1712.00378.)
    The step after the last one has A = 0: each sequence is cut there and bootstrapped
    from next_values[-1], as CleanRL bootstraps at the end of a rollout.
    """
    not_done = 1.0 - dones.to(values.dtype)
    go_on = not_done * (1.0 - truncated.to(values.dtype))
    deltas = rewards + gamma * next_values * not_done - values
    adv = torch.zeros_like(values)
    last = torch.zeros_like(values[..., 0])
    for t in range(values.shape[-1] - 1, -1, -1):
        last = deltas[..., t] + gamma * lam * go_on[..., t] * last
        adv[..., t] = last
    return adv, adv + values


def normalize_advantages(adv: Tensor, eps: float = 1e-8) -> Tensor:
    """(A - mean) / (std + eps), CleanRL's `norm_adv` (per minibatch there and here)."""
    return (adv - adv.mean()) / (adv.std(unbiased=False) + eps)


def policy_loss(new_logp: Tensor, old_logp: Tensor, adv: Tensor, clip: float) -> tuple[Tensor, Tensor, Tensor]:
    """The clipped surrogate (PPO paper eq. 7), as a loss to minimise:

        L = mean(max(-A * ratio, -A * clip(ratio, 1 - eps, 1 + eps)))

    Returns (loss, approx_kl, clip_fraction); approx_kl is the low-variance estimator
    mean((ratio - 1) - log ratio) (http://joschu.net/blog/kl-approx.html, as CleanRL)."""
    log_ratio = new_logp - old_logp
    ratio = log_ratio.exp()
    loss = torch.max(-adv * ratio, -adv * ratio.clamp(1.0 - clip, 1.0 + clip)).mean()
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_frac = ((ratio - 1.0).abs() > clip).float().mean()
    return loss, approx_kl, clip_frac


def value_loss(new_value: Tensor, old_value: Tensor, returns: Tensor, clip: float | None) -> Tensor:
    """0.5 * mean(max((V - R)^2, (V_clipped - R)^2)) with V_clipped = V_old +
    clip(V - V_old, -eps, eps) (CleanRL's `clip_vloss`; the PPO2 baselines' value
    clipping). clip=None gives the plain 0.5 * mean((V - R)^2)."""
    unclipped = (new_value - returns) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    clipped = old_value + (new_value - old_value).clamp(-clip, clip)
    return 0.5 * torch.max(unclipped, (clipped - returns) ** 2).mean()


def entropy_bonus(entropy: Tensor) -> Tensor:
    """Mean entropy; the loss subtracts ent_coef times it (PPO paper eq. 9)."""
    return entropy.mean()


def total_loss(pg: Tensor, v: Tensor, ent: Tensor, vf_coef: float, ent_coef: float) -> Tensor:
    """L = L_clip - c2 * S + c1 * L_vf (PPO paper eq. 9, signs for minimising)."""
    return pg - ent_coef * ent + vf_coef * v


def linear_schedule(start: float, end: float, frac: float) -> float:
    """start at frac 0, end at frac >= 1, linear between (CleanRL's `anneal_lr`, with a
    floor `end` instead of 0)."""
    f = min(max(frac, 0.0), 1.0)
    return start + (end - start) * f


def kl_exceeded(approx_kl: float, target_kl: float | None) -> bool:
    """The KL limit of an update (CleanRL's `target_kl`; Stable-Baselines3 checks it per
    minibatch as here): True when the policy moved further than target_kl from the one
    that collected the batch, and the update's remaining minibatches are skipped."""
    return target_kl is not None and approx_kl > target_kl


class ReturnNorm:
    """Running mean and variance of the value targets (the returns), for value-target
    normalisation (Andrychowicz et al. 2021, arXiv:2006.05990, "value normalisation"):
    the value head predicts (R - mean) / std; the learner turns its outputs back into
    returns for GAE. Batches merge with Chan et al.'s parallel variance formula.
    Tensors of shape () so that the learner's state_dict carries them."""

    def __init__(self, eps: float = 1e-4):
        self.mean = torch.zeros((), dtype=torch.float64)
        self.var = torch.ones((), dtype=torch.float64)
        self.count = torch.full((), eps, dtype=torch.float64)

    @property
    def std(self) -> Tensor:
        return self.var.clamp_min(1e-8).sqrt()

    def update(self, x: Tensor) -> None:
        x = x.detach().double().flatten().cpu()
        n = x.numel()
        if n == 0:
            return
        b_mean, b_var = x.mean(), x.var(unbiased=False)
        delta, total = b_mean - self.mean, self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + b_var * n + delta ** 2 * self.count * n / total) / total
        self.count = total

    def normalize(self, x: Tensor) -> Tensor:
        return (x - self.mean.to(x)) / self.std.to(x)

    def denormalize(self, x: Tensor) -> Tensor:
        return x * self.std.to(x) + self.mean.to(x)

    def state_dict(self) -> dict:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, sd: dict) -> None:
        self.mean, self.var, self.count = (sd[k].double().clone() for k in ("mean", "var", "count"))
