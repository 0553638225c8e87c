"""The PPO learner: one update over a TrajBatch, paced for the inference rounds.

    learner = Learner(net, LearnerConfig(...))
    while running:                                  # in a thread: asyncio.to_thread(...)
        tb = traj.get(timeout_s=1.0)
        if tb is None: continue
        stats = learner.run_update(tb)              # pauses after each minibatch
        engine.publish(learner.net.state_dict(), learner.version)   # between updates only

It reads like CleanRL's ppo.py update (GAE once per batch, then epochs of shuffled
minibatches with the clipped losses), with three changes for this harness:

- Minibatches are whole sequences grouped by their entity counts and padded to what
  holds them (a multiple of entity_pad, or the inference buckets; in a Warcraft III harness under Wine padding
  91 -> 49 entities, the update 10.5 -> 8.9 s). The order of the groups is shuffled
  each epoch.
- Statistics stay tensors until the end of the update and are read once (measured in a Warcraft III harness under Wine:
  every .item() is a device sync that stalls the inference rounds beside the learner).
  So a non-finite loss is found at the end: the update is then rolled back (weights and
  optimizer as they were) and NonFiniteLossError names the first bad minibatch.
- After each minibatch the learner makes the next minibatch's inputs, waits for its
  device work, then calls pause() (default: sleep update_pause_ms), so that inference
  rounds get the device and the CPU (measured in a Warcraft III harness under Wine: pauses of 4-8 ms brought rounds during
  an update from 39 ms back to ~6 ms, and more steps/s overall).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from w3async.learn import ppo
from w3async.sync.gather import BUCKETS
from w3async.learn.network import Network, Obs
from w3async.learn.trajectories import TrajBatch
from w3async.recipes.learning import LearnerConfig  # the recipe's [learner] section

LOSS_SLOTS = ("pg_loss", "v_loss", "entropy", "approx_kl", "clip_frac", "grad_norm")
"""The per-minibatch figures an update sums on the device and reads back once, as means
(UpdateStats' fields of the same names)."""


@dataclass
class UpdateStats:
    """One update, for learner.jsonl (losses are means over minibatches)."""

    version: int  # the policy version after this update
    steps: int
    minibatches: int
    pg_loss: float
    v_loss: float
    entropy: float
    approx_kl: float
    clip_frac: float
    explained_var: float
    update_s: float  # wall time of run_update, pauses included
    pause_s: float  # of it in pause()
    staleness_mean: float  # updates between the acting policy and this one, mean over steps
    staleness_max: int
    padding_mean: float  # padded entities per step in the minibatches
    lr: float = 0.0  # the learning rate of this update (lr_schedule)
    ent_coef: float = 0.0  # the entropy coefficient of this update (ent_schedule)
    minibatches_planned: int = 0  # minibatches the update would run without the KL limit
    kl_stopped: bool = False  # target_kl skipped the update's remaining minibatches
    grad_norm: float = 0.0  # the gradients' global norm before clipping, mean over minibatches
    value_mean: float | None = None  # norm_value: the running mean and std of the returns
    value_std: float | None = None


class NonFiniteLossError(RuntimeError):
    """A loss was NaN or infinite; the update was rolled back."""


class Minibatch(dict):
    """A minibatch's tensors by name (flat over B*T steps, entities cropped to bucket)."""


def minibatch_plan(n_ent: np.ndarray, minibatch_seqs: int, rng: np.random.Generator,
                   entity_pad: int = 0, buckets: tuple[int, ...] = BUCKETS) -> list[tuple[np.ndarray, int]]:
    """Sequences grouped by their largest entity count: (sequence indices, entities to
    pad to) per minibatch, the groups in random order. n_ent is (B, T). entity_pad > 0
    pads to a multiple of it, 0 to the smallest inference bucket that holds the group."""
    seq_ent = n_ent.max(axis=1)
    perm = rng.permutation(len(seq_ent))  # random order among equal counts
    order = perm[np.argsort(seq_ent[perm], kind="stable")]
    plan = []
    for i in range(0, len(order), minibatch_seqs):
        idx = np.sort(order[i : i + minibatch_seqs])
        most = max(int(seq_ent[idx].max()), 1)
        pad = (-(-most // entity_pad) * entity_pad if entity_pad > 0
               else next((b for b in buckets if b >= most), buckets[-1]))
        plan.append((idx, pad))
    return [plan[i] for i in rng.permutation(len(plan))]


class Learner:
    """PPO over TrajBatches for one Network (see the module docstring)."""

    def __init__(self, net: Network, cfg: LearnerConfig = LearnerConfig(), device: str = "cpu",
                 pause: Callable[[], None] | None = None, progress: Callable[[], float] | None = None):
        """pause: called between minibatches (default: sleep update_pause_ms); progress:
        the run's progress 0..1, the schedules' horizon when the config gives none."""
        self.net, self.cfg, self.device = net.to(device), cfg, torch.device(device)
        self.opt = torch.optim.Adam(net.parameters(), lr=cfg.lr, eps=cfg.adam_eps)
        self.pause = pause if pause is not None else self._sleep
        self.rng = np.random.default_rng(cfg.seed)
        self.version = 0  # updates done; the policy version the inference side publishes
        self._niced: set[int] = set()  # native ids of the threads thread_nice was applied to
        self._stream = None  # CUDA only: the learner's own stream
        self.steps_trained = 0
        self.ret_norm = ppo.ReturnNorm()  # used when cfg.norm_value
        self.progress = progress

    def _nice_this_thread(self) -> None:
        tid = threading.get_native_id()
        if self.cfg.thread_nice and tid not in self._niced:
            # On Linux setpriority(PRIO_PROCESS, tid) changes that one thread; raising a
            # nice value needs no privilege. Lowering it back would.
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + self.cfg.thread_nice)
            self._niced.add(tid)

    def _sleep(self) -> None:
        if self.cfg.update_pause_ms > 0:
            time.sleep(self.cfg.update_pause_ms / 1e3)

    # -- state for checkpoints -----------------------------------------------------------

    def state_dict(self) -> dict:
        return {"net": self.net.state_dict(), "opt": self.opt.state_dict(), "version": self.version,
                "steps_trained": self.steps_trained, "rng": self.rng.bit_generator.state,
                "ret_norm": self.ret_norm.state_dict()}

    def load_state_dict(self, sd: dict) -> None:
        self.net.load_state_dict(sd["net"])
        self.opt.load_state_dict(sd["opt"])
        self.version, self.steps_trained = int(sd["version"]), int(sd["steps_trained"])
        self.rng.bit_generator.state = sd["rng"]
        if "ret_norm" in sd:  # checkpoints before 2026-12-01 have none: the fresh statistics
            self.ret_norm.load_state_dict(sd["ret_norm"])

    # -- schedules -----------------------------------------------------------------------

    def schedule_frac(self) -> float:
        """How far the schedules are, 0..1: version / schedule_updates, else the run's
        progress (Training.progress), else 0."""
        if self.cfg.schedule_updates:
            return min(self.version / self.cfg.schedule_updates, 1.0)
        return min(max(self.progress(), 0.0), 1.0) if self.progress is not None else 0.0

    def coefficients(self, frac: float | None = None) -> tuple[float, float]:
        """(lr, ent_coef) at schedule progress frac (default: now)."""
        cfg = self.cfg
        f = self.schedule_frac() if frac is None else frac
        lr = ppo.linear_schedule(cfg.lr, cfg.lr_min, f) if cfg.lr_schedule == "linear" else cfg.lr
        ent = ppo.linear_schedule(cfg.ent_coef, cfg.ent_coef_min, f) if cfg.ent_schedule == "linear" else cfg.ent_coef
        return lr, ent

    # -- the update ----------------------------------------------------------------------

    def _to(self, a: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(a))
        if self.device.type == "cuda":  # pinned, so the upload does not hold the driver's lock (measured in a Warcraft III harness under Wine)
            return t.pin_memory().to(self.device, non_blocking=True)
        return t

    def _minibatch(self, b: dict[str, torch.Tensor], idx: np.ndarray, bucket: int) -> Minibatch:
        i = self._to(np.asarray(idx, np.int64))  # on CUDA pinned and non-blocking: no sync a minibatch
        n = len(idx) * b["logp"].shape[1]

        def flat(t: torch.Tensor) -> torch.Tensor:
            return t.index_select(0, i).reshape(n, *t.shape[2:])

        mb = Minibatch({k: flat(b[k]) for k in ("glob", "n_ent", "mask", "action", "logp", "v_old", "adv", "v_target",
                                                 "first")})
        mb["ent"] = flat(b["ent"][:, :, :bucket])
        mb["ent_type"] = flat(b["ent_type"][:, :, :bucket])
        mb["state0"] = b["state0"].index_select(0, i) if "state0" in b else None
        return mb

    def run_update(self, tb: TrajBatch) -> UpdateStats:
        """One PPO update (update_epochs passes of minibatches) over tb; see the module
        docstring. Raises NonFiniteLossError (and leaves the weights as they were) if a
        loss was not finite. On CUDA the update runs on a stream of its own, beside the
        inference rounds' streams (unchecked: no GPU in this project's CI)."""
        if self.device.type == "cuda":
            if self._stream is None:
                self._stream = torch.cuda.Stream(device=self.device)
            self._stream.wait_stream(torch.cuda.current_stream(self.device))
            try:
                with torch.cuda.stream(self._stream):
                    return self._update(tb)
            finally:
                # What the caller does next on its own stream (the publish's clone of these
                # weights, InferenceEngine.load_net) comes after the update's last kernel:
                # torch orders a stream's consumers only through wait_stream (before, the
                # publish was ordered only by the host read that ends an update).
                torch.cuda.current_stream(self.device).wait_stream(self._stream)
        return self._update(tb)

    def _update(self, tb: TrajBatch) -> UpdateStats:
        t_start = time.perf_counter()
        torch.set_num_threads(self.cfg.num_threads)  # per thread with torch's OpenMP backend
        self._nice_this_thread()
        cfg, net = self.cfg, self.net
        n_seq, seq_len = tb.shape
        before = (copy.deepcopy(net.state_dict()), copy.deepcopy(self.opt.state_dict()))
        ret_norm_before = self.ret_norm.state_dict()
        b = {
            "glob": self._to(tb.glob), "ent": self._to(tb.ent), "ent_type": self._to(tb.ent_type).long(),
            "n_ent": self._to(tb.n_ent).long(), "mask": self._to(tb.mask).bool(), "action": self._to(tb.action).long(),
            "logp": self._to(tb.logp), "value": self._to(tb.value), "first": self._to(tb.first),
        }
        if tb.state0 is not None:
            b["state0"] = self._to(tb.state0)
        lr, ent_coef = self.coefficients()
        for group in self.opt.param_groups:
            group["lr"] = lr
        with torch.no_grad():
            value, next_value = b["value"], self._to(tb.next_value)
            if cfg.norm_value:  # the value head's outputs are normalised returns: back to returns for GAE
                value, next_value = self.ret_norm.denormalize(value), self.ret_norm.denormalize(next_value)
            b["adv"], b["ret"] = ppo.gae(
                self._to(tb.reward), value, next_value, self._to(tb.done), self._to(tb.truncated),
                cfg.gamma, cfg.gae_lambda,
            )
            if cfg.norm_value:
                self.ret_norm.update(b["ret"])
                b["v_target"], b["v_old"] = self.ret_norm.normalize(b["ret"]), self.ret_norm.normalize(value)
            else:
                b["v_target"], b["v_old"] = b["ret"], value
        plan = [mb for _ in range(cfg.update_epochs) for mb in minibatch_plan(tb.n_ent, cfg.minibatch_seqs, self.rng, cfg.entity_pad,
                                                                        net.layout.buckets)]
        planned = len(plan)
        sums = torch.zeros(len(LOSS_SLOTS), device=self.device)  # summed on the device, read once
        bad = torch.full((), len(plan), device=self.device)  # index of the first non-finite loss
        pause_s = 0.0
        net.train()
        nxt = self._minibatch(b, *plan[0])
        for k in range(len(plan)):
            mb = nxt
            new = net.evaluate(
                Obs(mb["glob"], mb["ent"], mb["ent_type"], mb["n_ent"], mb["mask"]), mb["action"],
                state0=mb["state0"], first=mb["first"], seq_len=seq_len,
            )
            adv = ppo.normalize_advantages(mb["adv"]) if cfg.norm_adv else mb["adv"]
            pg, kl, clip_frac = ppo.policy_loss(new.logp, mb["logp"], adv, cfg.clip_coef)
            v = ppo.value_loss(new.value, mb["v_old"], mb["v_target"], cfg.vf_clip)
            ent = ppo.entropy_bonus(new.entropy)
            loss = ppo.total_loss(pg, v, ent, cfg.vf_coef, ent_coef)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = nn.utils.clip_grad_norm_(net.parameters(), cfg.max_grad_norm)
            self.opt.step()
            with torch.no_grad():
                sums += torch.stack([pg, v, ent, kl, clip_frac, grad_norm.to(pg)]).detach()  # LOSS_SLOTS' order
                bad = torch.where(torch.isfinite(loss) | (bad < k), bad, torch.full_like(bad, k))
            if cfg.target_kl is not None and ppo.kl_exceeded(float(kl), cfg.target_kl):  # a host read: only with a limit
                plan = plan[: k + 1]
                break
            if k + 1 < len(plan):
                nxt = self._minibatch(b, *plan[k + 1])  # made before the pause: 1,687 -> 1,902 steps/s in a Warcraft III harness under Wine
                if self.device.type == "cuda" and cfg.update_pause_ms > 0:  # a pause frees the device only
                    torch.cuda.current_stream(self.device).synchronize()       # once the queued work is done
                t_p = time.perf_counter()
                self.pause()
                pause_s += time.perf_counter() - t_p
        net.eval()
        bad = torch.clamp(bad, max=len(plan))  # the sentinel "none" is the number of minibatches that ran
        padding = sum(bucket * len(idx) * seq_len for idx, bucket in plan)  # entity places the minibatches held
        with torch.no_grad():
            y, res = b["ret"], b["ret"] - value
            ev = 1.0 - res.var(unbiased=False) / y.var(unbiased=False).clamp_min(1e-8)
            out = torch.cat([sums / len(plan), ev[None], bad[None].float()]).cpu().numpy()  # the one host read
        got = dict(zip(LOSS_SLOTS + ("explained_var", "bad"), (float(x) for x in out)))
        if got["bad"] < len(plan):
            net.load_state_dict(before[0])
            self.opt.load_state_dict(before[1])
            k = int(got["bad"])
            if cfg.norm_value:
                self.ret_norm.load_state_dict(ret_norm_before)
            raise NonFiniteLossError(
                f"update {self.version + 1}: the loss of minibatch {k} of {planned} (epoch "
                f"{k // max(planned // cfg.update_epochs, 1)}) was not finite; the update was rolled back "
                f"(check the rewards and observations of the batch, or lower lr={cfg.lr})"
            )
        stale = self.version - tb.version.astype(np.int64)
        self.version += 1
        self.steps_trained += tb.reward.size
        n_real = float(tb.n_ent.sum()) * len(plan) / planned * cfg.update_epochs  # of the minibatches that ran
        return UpdateStats(
            version=self.version, steps=int(tb.reward.size), minibatches=len(plan),
            **{k: got[k] for k in LOSS_SLOTS}, explained_var=got["explained_var"],
            update_s=time.perf_counter() - t_start, pause_s=pause_s, staleness_mean=float(stale.mean()),
            staleness_max=int(stale.max()),
            padding_mean=(padding - n_real) / (tb.reward.size * cfg.update_epochs * len(plan) / planned),
            lr=lr, ent_coef=ent_coef, minibatches_planned=planned, kl_stopped=len(plan) < planned,
            value_mean=float(self.ret_norm.mean) if cfg.norm_value else None,
            value_std=float(self.ret_norm.std) if cfg.norm_value else None,
        )
