"""Doorbells: how a game and the supervisor wake each other, two per game process.

`obs`: the game rings it after posting its rows; the supervisor's loop reads it.
`act`: the supervisor rings it after answering the game's rows; the game waits on it.
A doorbell only wakes: the rows' sequence numbers say what is ready, so several
rings may merge into one wake-up and nothing is lost.

Native games get eventfds, inherited by number. Windows games under Wine get FIFOs
in the run folder, opened through Wine's Z: drive. The supervisor opens each FIFO
read-write before the game starts: opened the usual way (read-only, write-only) the
two ends' opens raced, and reads saw end-of-file while the game was still starting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .gather import Doorbell
from .runtime_wine import windows_path

_EVENTFD_ONE = (1).to_bytes(8, "little")


@dataclass
class Doorbells:
    kind: str  # "eventfd" or "fifo"
    obs_fd: int  # the supervisor reads it
    act_fd: int  # the supervisor writes it
    child_env: dict = field(default_factory=dict)
    child_fds: tuple = ()
    paths: tuple = ()

    @property
    def act(self) -> Doorbell:
        return Doorbell(self.act_fd, 8 if self.kind == "eventfd" else 1)

    def drain_obs(self) -> None:
        """Read whatever rang; never blocks."""
        try:
            os.read(self.obs_fd, 8 if self.kind == "eventfd" else 4096)
        except BlockingIOError:
            pass

    def ring_act(self) -> None:
        try:
            os.write(self.act_fd, _EVENTFD_ONE if self.kind == "eventfd" else b"\x01")
        except BlockingIOError:
            pass  # a full FIFO: a wake-up is pending anyway

    def close(self) -> None:
        for fd in {self.obs_fd, self.act_fd}:
            try:
                os.close(fd)
            except OSError:
                pass
        for p in self.paths:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def eventfd_pair() -> Doorbells:
    """Two eventfds for a native game, passed to it by number (W3S_OBS_FD, W3S_ACT_FD).
    Non-blocking: the shim polls before it reads, so the shared flag is harmless."""
    obs = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    act = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    return Doorbells("eventfd", obs, act, {"W3S_OBS_FD": str(obs), "W3S_ACT_FD": str(act)}, (obs, act))


def fifo_pair(folder: Path, slot: int) -> Doorbells:
    """Two FIFOs in folder for a Windows game, named to it by Z: path."""
    folder.mkdir(parents=True, exist_ok=True)
    fds, paths = [], []
    for name in (f"obs-{slot}.fifo", f"act-{slot}.fifo"):
        p = folder / name
        try:
            p.unlink()
        except FileNotFoundError:
            pass
        os.mkfifo(p, 0o600)
        fds.append(os.open(p, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC))
        paths.append(str(p))
    env = {"W3S_OBS_FIFO": windows_path(paths[0]), "W3S_ACT_FIFO": windows_path(paths[1])}
    return Doorbells("fifo", fds[0], fds[1], env, (), tuple(paths))
