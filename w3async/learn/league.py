"""The league: snapshots of the policy every N updates, and opponents sampled from them.

    league = League(run_dir, LeagueConfig(snapshot_every=10, latest_share=0.5))
    league.maybe_snapshot(learner.version, learner.net.state_dict())   # after each update
    opp = league.sample_opponent()        # at a self-play lane's episode start
    if opp is None: ...                   # the current policy (the engine's net 0)
    else: net = opponent_nets.acquire(opp.version, lambda: league.load(opp))  # a past-snapshot net

Snapshots are files in runs/<run>/league/ (snap-<version>.pt, written atomically), so a
resumed run keeps its league; the list of snapshots and the sampler's random state are
part of the checkpoint (state_dict / load_state_dict).

OpponentNets maps opponents (snapshots) onto the inference engine's past-snapshot nets
(1..k): a snapshot already in a net is reused, a free net (no lane playing it) is
reloaded (measured in a Warcraft III harness under Wine: past snapshots through a few nets with swapped weights, not a
network each).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from w3async.learn.checkpoint import CheckpointLoadError, atomic_save, describe, read_file
from w3async.run_folder import RunFolder
from w3async.recipes.learning import LeagueConfig  # the recipe's [league] section


@dataclass(frozen=True)
class Snapshot:
    version: int  # the policy version (learner updates) it was taken at
    file: str  # its file name in runs/<run>/league/


class League:
    def __init__(self, run_dir: Path, cfg: LeagueConfig = LeagueConfig()):
        self.dir = RunFolder(run_dir).league
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cfg = cfg
        self.snapshots: list[Snapshot] = []
        self.rng = np.random.default_rng(cfg.seed)

    def maybe_snapshot(self, version: int, state_dict: dict) -> Snapshot | None:
        """Snapshot the weights if `version` is a multiple of snapshot_every (and new)."""
        if version % self.cfg.snapshot_every or any(s.version == version for s in self.snapshots):
            return None
        snap = Snapshot(int(version), f"snap-{int(version):08d}.pt")
        atomic_save({k: v.detach().cpu() for k, v in state_dict.items()}, self.dir / snap.file)
        self.snapshots.append(snap)
        return snap

    def sample_opponent(self) -> Snapshot | None:
        """None (play the current policy) with probability latest_share or while the
        league is empty; otherwise a uniformly sampled recent snapshot."""
        pool = self.snapshots[-self.cfg.max_snapshots :]
        if not pool or self.rng.random() < self.cfg.latest_share:
            return None
        return pool[int(self.rng.integers(len(pool)))]

    def load(self, snap: Snapshot) -> dict:
        return read_file(self.dir / snap.file)

    def state_dict(self) -> dict:
        return {"snapshots": [asdict(s) for s in self.snapshots], "rng": self.rng.bit_generator.state}

    def load_state_dict(self, sd: dict) -> None:
        """Take a checkpoint's league, after checking that every snapshot it names is
        there and that those it may sample (the newest max_snapshots) load. Raises
        CheckpointLoadError naming the first bad file and why; nothing is changed then."""
        try:
            snapshots = [Snapshot(**s) for s in sd["snapshots"]]
            rng = np.random.default_rng()
            rng.bit_generator.state = sd["rng"]
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointLoadError(self.dir, f"the checkpoint's league state is malformed ({describe(e)})") from e
        pool = set(s.file for s in snapshots[-self.cfg.max_snapshots :])
        for s in snapshots:
            path = self.dir / s.file
            if s.file != Path(s.file).name:
                raise CheckpointLoadError(path, "a snapshot name outside the league folder")
            try:
                if s.file in pool:
                    read_file(path)
                elif not path.is_file():
                    raise CheckpointLoadError(path, "No such file or directory [ENOENT]", errno.ENOENT)
            except CheckpointLoadError as e:  # missing, unreadable, corrupt: all the same to a resume
                raise CheckpointLoadError(path, f"league snapshot of version {s.version}: {e.cause}", e.errno) from e
        self.snapshots = snapshots
        self.rng.bit_generator.state = sd["rng"]


class OpponentNets:
    """Which past snapshot each of the engine's nets 1..n_past holds, and how many lanes
    play it. acquire() returns a net for a snapshot (loading it into a free one if it is
    in none) or None when every net is in use by another snapshot."""

    def __init__(self, n_past: int, load_net: Callable[[int, dict, int], None]):
        self.load_net = load_net  # InferenceEngine.load_net
        self.version = [-1] * (n_past + 1)  # per net; index 0 unused (the current policy)
        self.users = [0] * (n_past + 1)

    def acquire(self, version: int, weights: Callable[[], dict]) -> int | None:
        for k in range(1, len(self.version)):
            if self.version[k] == version:
                self.users[k] += 1
                return k
        free = [k for k in range(1, len(self.version)) if self.users[k] == 0]
        if not free:
            return None
        k = free[0]
        self.load_net(k, weights(), version)
        self.version[k], self.users[k] = version, 1
        return k

    def release(self, net: int) -> None:
        if net <= 0 or self.users[net] <= 0:
            raise ValueError(f"release({net}): net is not held (users {self.users})")
        self.users[net] -= 1
