"""Processes as /proc shows them: what the supervisor and the clean-ups look for.

Zombies count as gone everywhere here (w3async.procstat: the rule, and `alive`, shared
with the status reader).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

from w3async.procstat import GONE_STATES, alive, stat_fields  # noqa: F401 (alive: part of this API)


def live_processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, stat fields) of every live (non-zombie) process."""
    for d in os.listdir("/proc"):
        if d.isdigit():
            fields = stat_fields(d)
            if fields and fields[0] not in GONE_STATES:
                yield int(d), fields


def group_members(pgid: int) -> list[int]:
    """Live processes still in process group pgid."""
    return [pid for pid, f in live_processes() if len(f) > 2 and f[2] == str(pgid).encode()]


def environ(pid: int) -> bytes:
    """The process's environment block ('' when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def with_env(key: str, value: str) -> list[int]:
    """Live processes with key=value in their environment."""
    needle = f"{key}={value}".encode()
    return [pid for pid, _ in live_processes() if needle in environ(pid).split(b"\0")]


def mentioning(needle: bytes) -> list[int]:
    """Live processes whose environment block contains needle (a run's marker: what a
    game's helpers inherit even when they leave its process group)."""
    me = os.getpid()
    return [pid for pid, _ in live_processes() if pid != me and needle and needle in environ(pid)]


def kill(pid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a process; False when it is gone (or not ours)."""
    try:
        os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def killpg(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal a process group; False when it is gone (or not ours)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
