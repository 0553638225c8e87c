"""Native Linux games: a pipe and eventfd doorbells, the table by name, a process group each."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from w3async.sync.doorbells import Doorbells, SharedObs, native_pair, shared_obs_pipe
from w3async.sync.table import GameSegment


class NativeRuntime:
    name = "native"

    def __init__(self):
        self.obs: SharedObs | None = None

    def open_obs(self, run_dir: Path) -> SharedObs:
        """The obs doorbell all this runtime's games ring (made once)."""
        if self.obs is None:
            self.obs = shared_obs_pipe()
        return self.obs

    def doorbells(self, run_dir: Path, slot: int) -> Doorbells:
        return native_pair(self.open_obs(run_dir))

    def spawn(self, binary: Path, env: dict, bells: Doorbells, segment: GameSegment, nice: int, log) -> subprocess.Popen:
        """Start the game in a process group of its own (so that ending it ends its
        children), niced, stderr and stdout to log."""
        full = dict(os.environ)
        full.update(env)
        full.update(bells.child_env)
        full["W3S_SHM"] = segment.name
        full["W3S_PARENT_PID"] = str(os.getpid())
        return subprocess.Popen(
            nice_prefix(nice) + [str(binary)],
            env=full, pass_fds=bells.child_fds, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, cwd=str(binary.parent),
        )

    def cleanup(self) -> list[int]:
        return []

    def close(self) -> None:
        if self.obs is not None:
            self.obs.close()
            self.obs = None


def nice_prefix(nice: int) -> list[str]:
    """`nice -n N` before the command: exec'd, so every thread of the game starts niced
    (setpriority after the spawn would miss threads made before it, and a preexec_fn
    is unsafe next to the inference thread)."""
    return ["nice", "-n", str(nice)] if nice else []
