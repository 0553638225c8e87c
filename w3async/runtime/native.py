"""Native Linux games: a pipe and eventfd doorbells, the table by name."""

from __future__ import annotations

import os
from pathlib import Path

from w3async.runtime.gamestart import GameStart, game_environ
from w3async.sync.doorbells import Doorbells, SharedObs, native_pair, shared_obs_pipe
from w3async.sync.table import GameSegment


class NativeRuntime:
    """A Runtime (gamestart.py) for Linux executables."""

    name = "native"

    def __init__(self):
        self.obs: SharedObs | None = None

    def prepare(self) -> None:
        pass

    def open_obs(self, run_dir: Path) -> SharedObs:
        if self.obs is None:
            self.obs = shared_obs_pipe()
        return self.obs

    def doorbells(self, run_dir: Path, slot: int) -> Doorbells:
        return native_pair(self.open_obs(run_dir))

    def start(self, slot, env: dict[str, str], segment: GameSegment) -> GameStart:
        """The game by its own path, its segment by name; the doorbells are inherited fds."""
        bells = slot.bells
        full = game_environ(env, bells.child_env, {"W3S_SHM": segment.name, "W3S_PARENT_PID": str(os.getpid())})
        return GameStart([str(slot.binary)], full, str(slot.binary.parent), f"W3S_SHM={segment.name}\0".encode(),
                         pass_fds=tuple(bells.child_fds), see=[segment.path])

    def game_lost(self, slot) -> bool:
        return False

    def prefixes(self) -> list[str]:
        return []

    def cleanup(self) -> list[int]:
        return []

    def leftovers(self) -> list[int]:
        return []

    def close(self) -> None:
        if self.obs is not None:
            self.obs.close()
            self.obs = None
