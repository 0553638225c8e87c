"""The PPO update's candidate speed-ups on the CPU, side by side in one run:
one update of fgself's shape (512 steps, 2 epochs, minibatches of 8 sequences
of 16 steps, the fgself network) timed for each variant, the variants interleaved so
that the shared machine's noise falls on all of them alike.

    python bench/update_bench.py [--rounds 5] [--compile]

The batch's entity counts follow what fgself's duel batches hold (captured from a run:
a mean of 14-21 entities a step, up to ~42, steps of a sequence within a few of each
other); the values are random (inference_bench's batch), which does not change an
update's cost. Each variant also reports how far its losses are from the baseline's on
the same batch and weights (a speed-up that changes the update's numbers changes the
curve and needs a run).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from w3async.games.duel.spec import DUEL_SPEC as SPEC  # noqa: E402
from w3async.learn.learner import Learner, LearnerConfig  # noqa: E402
from w3async.learn.network import NetConfig, Network  # noqa: E402
from w3async.learn.trajectories import TrajBatch  # noqa: E402
from inference_bench import synthetic_trajbatch  # noqa: E402

NET = NetConfig(d_model=64, n_heads=4, n_layers=2, noop_bias=3.0)  # recipes/fgself.toml


def duel_like_batch(seed: int = 0, n_seq: int = 32, t: int = 16, bucket: int = 48) -> TrajBatch:
    """inference_bench's random batch with fgself's entity counts: a count per sequence,
    its steps within a few of it."""
    rng = np.random.default_rng(seed)
    base = rng.integers(6, 40, n_seq)[:, None]
    n_ent = np.clip(base - rng.integers(0, 5, (n_seq, t)), 1, bucket).astype(np.int32)
    return synthetic_trajbatch(bucket, n_seq, t, bucket, n_ent=n_ent)


def _adam(kind: str) -> Callable[[Learner], None]:
    def set_opt(learner: Learner) -> None:
        c = learner.cfg
        learner.opt = torch.optim.Adam(learner.net.parameters(), lr=c.lr, eps=c.adam_eps, **{kind: True})
    return set_opt


def _autocast_bf16(learner: Learner) -> None:
    evaluate = learner.net.evaluate

    def in_bf16(*a, **k):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            r = evaluate(*a, **k)
        return type(r)(*(x.float() for x in r))
    learner.net.evaluate = in_bf16


def _compiled(learner: Learner) -> None:
    learner.net.evaluate = torch.compile(learner.net.evaluate, dynamic=True)


# name -> (LearnerConfig changes, what to do to the learner after it is made)
VARIANTS: dict[str, tuple[dict, Callable[[Learner], None] | None]] = {
    "baseline (entity_pad 8)": ({}, None),
    "entity_pad 4": ({"entity_pad": 4}, None),
    "entity_pad 1": ({"entity_pad": 1}, None),
    "Adam fused": ({}, _adam("fused")),
    "Adam foreach": ({}, _adam("foreach")),
    "bf16 autocast": ({}, _autocast_bf16),
}


def make(changes: dict, prepare) -> Learner:
    torch.manual_seed(0)
    cfg = LearnerConfig(lr=1e-3, ent_coef=0.003, update_epochs=2, minibatch_seqs=8, num_threads=1, **changes)
    learner = Learner(Network(SPEC, NET), cfg)
    if prepare is not None:
        prepare(learner)
    return learner


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="timed updates per variant, interleaved")
    ap.add_argument("--compile", action="store_true", help="also torch.compile (its first update compiles: minutes)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    variants = dict(VARIANTS)
    if a.compile:
        variants["torch.compile"] = ({}, _compiled)
    tb = duel_like_batch()
    learners, first_s, losses = {}, {}, {}
    for name, (changes, prepare) in variants.items():
        learners[name] = make(changes, prepare)
        t0 = time.perf_counter()
        s = learners[name].run_update(tb)  # the first update, from the same weights for all
        first_s[name], losses[name] = time.perf_counter() - t0, (s.pg_loss, s.v_loss, s.entropy)
    times: dict[str, list[float]] = {n: [] for n in variants}
    for _ in range(a.rounds):
        for name, learner in learners.items():
            times[name].append(learner.run_update(tb).update_s)
    base = "baseline (entity_pad 8)"
    b = statistics.median(times[base])
    print(f"one PPO update of fgself's shape ({tb.reward.size} steps, 2 epochs, 8 minibatches; mean "
          f"{tb.n_ent.mean():.1f} entities a step), 1 torch thread, median of {a.rounds} interleaved")
    hdr = f"{'variant':>24} {'update s':>9} {'vs baseline':>11} {'first s':>8} {'steps/s':>8} {'loss diff':>10}"
    print(hdr)
    print("-" * len(hdr))
    for name in variants:
        m = statistics.median(times[name])
        diff = max(abs(x - y) for x, y in zip(losses[name], losses[base]))
        print(f"{name:>24} {m:>9.3f} {b / m:>10.2f}x {first_s[name]:>8.1f} {tb.reward.size / m:>8.0f} {diff:>10.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
