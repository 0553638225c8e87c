"""The recipe's learning sections ([network], [learner], [trajectories], [league]):
pydantic dataclasses, frozen, like the runtime sections of recipes/sections.py.

They import no torch, so that a recipe loads without it; w3async.learn takes them as
they are (learn.network.NetConfig is this NetConfig), built once by the recipe or by
hand (`LearnerConfig(lr=1e-3)`). The annotations hold each key's type (strict scalars,
finite floats) and the bounds every section's keys share (durations at most a year,
seeds >= 0); __post_init__, which pydantic runs after them, holds the sections' own
checks, every broken one named in one ValueError ("LearnerConfig: lr=0 must be > 0;
gamma=2 must be in [0, 1]"), which a recipe reports as "[learner] LearnerConfig: ...".
"""

from __future__ import annotations

from pydantic import Field
from pydantic.dataclasses import dataclass

from w3async.recipes.checks import CONFIG, Bool, Float, Int, Str, year_in


def _below(cfg: object, floor: float, *keys: str) -> list[str]:
    return [f"{k}={getattr(cfg, k)} must be >= {floor}" for k in keys if getattr(cfg, k) < floor]


def _outside(cfg: object, lo: float, hi: float, text: str, *keys: str) -> list[str]:
    return [f"{k}={getattr(cfg, k)} must be in {text}" for k in keys if not lo <= getattr(cfg, k) <= hi]


def _refuse(cfg: object, errors: list[str]) -> None:
    """One ValueError naming every broken key: "LearnerConfig: lr=0 must be > 0; ..."."""
    if errors:
        raise ValueError(f"{type(cfg).__name__}: " + "; ".join(errors))


@dataclass(frozen=True, config=CONFIG)
class NetConfig:
    """The network's size; the recipe's `network` section."""

    d_model: Int = 64
    """Width of every token and of the pooled state."""
    n_heads: Int = 4
    """Attention heads per block (d_model must divide by it)."""
    n_layers: Int = 2
    """Attention blocks over the entity set."""
    ff_mult: Int = 2
    """Feed-forward width as a multiple of d_model."""
    gru: Bool = False
    """A GRU cell after pooling, its state kept per table row (reset on FIRST)."""
    noop_bias: Float = 0.0
    """Initial logit bias of each head's "change nothing" choice (GameSpec.noop): with 3,
    a fresh duel policy keeps its orders about a third of the steps instead of 1 in 39,
    so exploration is not an army re-ordered at random every half second."""

    def __post_init__(self) -> None:
        heads = ([f"n_heads={self.n_heads} must be >= 1 and divide d_model={self.d_model}"]
                 if self.n_heads < 1 or self.d_model % self.n_heads else [])
        _refuse(self, [*_below(self, 8, "d_model"), *heads, *_below(self, 0, "n_layers"), *_below(self, 1, "ff_mult")])


@dataclass(frozen=True, config=CONFIG)
class LearnerConfig:
    """The recipe's `learner` section."""

    lr: Float = 3e-4
    """Adam's learning rate."""
    adam_eps: Float = 1e-5
    """Adam's epsilon (CleanRL's 1e-5, not torch's 1e-8)."""
    gamma: Float = 0.99
    """Discount per step."""
    gae_lambda: Float = 0.95
    """GAE's lambda: bias (0) against variance (1) of the advantages."""
    clip_coef: Float = 0.2
    """PPO's ratio clip epsilon."""
    vf_clip: Float | None = 0.2
    """Value clipping around the collected value; None for the plain squared error."""
    ent_coef: Float = 0.01
    """Weight of the entropy bonus."""
    vf_coef: Float = 0.5
    """Weight of the value loss."""
    max_grad_norm: Float = 0.5
    """Gradients are clipped to this global norm."""
    update_epochs: Int = 2
    """Passes over each batch."""
    minibatch_seqs: Int = 8
    """Sequences per minibatch (a minibatch is minibatch_seqs * seq_len steps)."""
    norm_adv: Bool = True
    """Normalise advantages per minibatch."""
    entity_pad: Int = 8
    """Minibatches pad entities up to a multiple of this; 0 pads to the inference buckets
    (32, 48, 64, ...). Eager CPU updates run any shape, so fine padding only saves work
    (attention and the per-entity layers cost per padded entity); a graphed GPU update
    would want the few bucket shapes."""
    update_pause_ms: Float = Field(0.0, le=year_in("update_pause_ms"))
    """Sleep after each minibatch so that inference rounds get the CPU/GPU (measured in a Warcraft III harness under Wine: 4-8 ms)."""
    num_threads: Int = 1
    """torch threads of the learner's thread (on 2 cores: 1 here, 1 for inference)."""
    thread_nice: Int = 0
    """Nice of the thread that runs run_update (Linux sets it per thread; 0 leaves it).
    A positive value lets the inference worker and the loop take the CPU first, and the
    learner the rest (measured in a Warcraft III harness under Wine: niced games let the server and learner go first)."""
    seed: Int = Field(0, ge=0)
    """Seeds the minibatch order."""
    target_kl: Float | None = None
    """The KL limit of an update: once a minibatch's approx_kl exceeds it, the update's
    remaining minibatches (this epoch's and the later epochs') are skipped (CleanRL's and
    Stable-Baselines3's target_kl; None: no limit, every minibatch runs)."""
    lr_schedule: Str = "constant"
    """"constant" (lr throughout) or "linear": lr decays linearly to lr_min over the
    schedule's horizon (schedule_updates, else the run's stop limit) and stays there."""
    lr_min: Float = 0.0
    """The floor of the linear lr schedule."""
    ent_schedule: Str = "constant"
    """"constant" (ent_coef throughout) or "linear": ent_coef decays linearly to
    ent_coef_min over the same horizon."""
    ent_coef_min: Float = 0.0
    """The floor of the linear entropy schedule."""
    schedule_updates: Int = 0
    """The schedules' horizon in updates; 0: the run's stop limit (stop.updates, else the
    run's time over stop.minutes/seconds, counted across resumes: Training.progress)."""
    norm_value: Bool = False
    """Value-target normalisation: the value head learns (R - mean) / std with a running
    mean and std of the returns (ppo.ReturnNorm, kept in checkpoints); its outputs are
    turned back into returns for GAE. False: the value head predicts returns as they are."""

    def __post_init__(self) -> None:
        errors = [f"{k}={getattr(self, k)} must be > 0" for k in ("lr", "adam_eps", "max_grad_norm")
                  if not getattr(self, k) > 0]
        errors += _outside(self, 0, 1, "[0, 1]", "gamma", "gae_lambda") + _below(self, 0, "entity_pad")
        errors += _below(self, 1, "update_epochs", "minibatch_seqs", "num_threads")
        errors += _outside(self, 0, 19, "0..19", "thread_nice")
        errors += [f"{k}={getattr(self, k)!r} must be 'constant' or 'linear'" for k in ("lr_schedule", "ent_schedule")
                   if getattr(self, k) not in ("constant", "linear")]
        if self.target_kl is not None and not self.target_kl > 0:
            errors.append(f"target_kl={self.target_kl} must be > 0 (or unset: no limit)")
        if self.lr_min > self.lr:
            errors.append(f"lr_min={self.lr_min} must be <= lr={self.lr}")
        if self.ent_coef_min > self.ent_coef:
            errors.append(f"ent_coef_min={self.ent_coef_min} must be <= ent_coef={self.ent_coef}")
        _refuse(self, errors + _below(self, 0, "clip_coef", "ent_coef", "vf_coef", "update_pause_ms", "lr_min",
                                      "ent_coef_min", "schedule_updates"))


@dataclass(frozen=True, config=CONFIG)
class TrajConfig:
    """The recipe's trajectory settings."""

    seq_len: Int = 16
    """Steps per sequence (the learner's time axis; the GRU unrolls over it)."""
    seqs_per_batch: Int = 32
    """Sequences per learner batch: a batch is seq_len * seqs_per_batch steps."""
    queue_batches: Int = 1
    """Finished batches that may wait for the learner; staleness grows with it."""

    def __post_init__(self) -> None:
        _refuse(self, _below(self, 1, "seq_len", "seqs_per_batch", "queue_batches"))


@dataclass(frozen=True, config=CONFIG)
class LeagueConfig:
    """The recipe's `league` section."""

    snapshot_every: Int = 10
    """A snapshot every this many updates."""
    latest_share: Float = 0.5
    """Share of self-play episodes against the current policy; the rest against a past snapshot."""
    max_snapshots: Int = 50
    """Opponents are sampled from the newest this many snapshots (older files stay on disk)."""
    seed: Int = Field(0, ge=0)
    """Seeds the opponent sampler."""

    def __post_init__(self) -> None:
        _refuse(self, [*_below(self, 1, "snapshot_every"), *_outside(self, 0, 1, "[0, 1]", "latest_share"),
                       *_below(self, 1, "max_snapshots")])

