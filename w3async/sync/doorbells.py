"""Doorbells: how a game and the supervisor wake each other, two per game process.

`obs`: the game rings it after posting its rows; the supervisor's loop reads it.
`act`: the supervisor rings it after answering the game's rows; the game waits on it.
A doorbell only wakes: the rows' sequence numbers say what is ready, so several
rings may merge into one wake-up and nothing is lost.

The obs doorbell of every game of a runtime is one and the same (the games need not
know): the loop then wakes once for all the games that posted since it last looked,
instead of running a callback and a read per game.

Native games get the write end of a pipe (obs) and an eventfd (act), inherited by
number. The obs doorbell is a pipe, not an eventfd, because every native game holds it:
an inherited eventfd is the supervisor's own open file, which any game could read (its
rings taken: the rows wait unseen) or make blocking (fcntl: the loop's next read of an
empty eventfd never returns). A game's end of a pipe can only write, and its flags are
its own. Windows games under Wine get FIFOs in the run folder, opened through Wine's
Z: drive. The supervisor opens each FIFO
read-write before the game starts: opened the usual way (read-only, write-only) the
two ends' opens raced, and reads saw end-of-file while the game was still starting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from w3async.sync.gather import Doorbell

_EVENTFD_ONE = (1).to_bytes(8, "little")

# Removing a FIFO that may already be gone: the stdlib's unlink(missing_ok=True), not
# w3async.files.discard, since sync/ imports nothing else of the package.


@dataclass
class SharedObs:
    """The obs doorbell that all the games of a runtime ring."""

    kind: str  # "pipe" or "fifo"
    fd: int  # the supervisor reads it
    path: str = ""
    write_fd: int = -1  # the pipe's other end: what native games get

    def drain(self) -> bool:
        """Read whatever rang; never blocks (the read end's flags are the supervisor's own).
        Whether anything had rung."""
        try:
            return bool(os.read(self.fd, 65536))
        except BlockingIOError:
            return False

    def close(self) -> None:
        for fd in (self.fd, self.write_fd):
            try:
                if fd >= 0:
                    os.close(fd)
            except OSError:
                pass
        if self.path:
            Path(self.path).unlink(missing_ok=True)


def shared_obs_pipe() -> SharedObs:
    """A pipe, both ends non-blocking: a game's ring into a full pipe (64 KiB of rings not
    yet read) fails with EAGAIN, and the shim takes that as rung (a wake is pending)."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    return SharedObs("pipe", r, write_fd=w)


def shared_obs_fifo(folder: Path) -> SharedObs:
    fd, path = _open_fifo(folder / "obs.fifo")
    return SharedObs("fifo", fd, path)


def _open_fifo(p: Path) -> tuple[int, str]:
    """A fresh FIFO, opened read-write and non-blocking before any game opens it."""
    p.parent.mkdir(parents=True, exist_ok=True)
    p.unlink(missing_ok=True)
    os.mkfifo(p, 0o600)
    return os.open(p, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC), str(p)


@dataclass
class Doorbells:
    """A game's doorbells: its own act doorbell and its runtime's shared obs doorbell."""

    kind: str  # "eventfd" or "fifo": the act doorbell's
    obs_fd: int  # the supervisor reads it (shared: not closed with the game)
    act_fd: int  # the supervisor writes it
    child_env: dict = field(default_factory=dict)
    child_fds: tuple = ()
    paths: tuple = ()

    @property
    def act(self) -> Doorbell:
        return Doorbell(self.act_fd, 8 if self.kind == "eventfd" else 1)

    def ring_act(self) -> None:
        try:
            os.write(self.act_fd, _EVENTFD_ONE if self.kind == "eventfd" else b"\x01")
        except BlockingIOError:
            pass  # a full FIFO: a wake-up is pending anyway

    def close(self) -> None:
        """Close the game's own act doorbell (the shared obs one stays)."""
        try:
            os.close(self.act_fd)
        except OSError:
            pass
        for p in self.paths:
            Path(p).unlink(missing_ok=True)


def native_pair(obs: SharedObs) -> Doorbells:
    """For a native game: the write end of the shared obs pipe and a new act eventfd,
    passed to it by number (W3S_OBS_FD, W3S_ACT_FD)."""
    act = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    return Doorbells("eventfd", obs.fd, act, {"W3S_OBS_FD": str(obs.write_fd), "W3S_ACT_FD": str(act)},
                     (obs.write_fd, act))


def fifo_pair(folder: Path, slot: int, obs: SharedObs) -> Doorbells:
    """The shared obs FIFO and a new act FIFO for a Windows game; the runtime names them
    to the game (W3S_OBS_FIFO, W3S_ACT_FIFO, as its own paths) in child_env."""
    act_fd, act_path = _open_fifo(folder / f"act-{slot}.fifo")
    return Doorbells("fifo", obs.fd, act_fd, {}, (), (act_path,))
