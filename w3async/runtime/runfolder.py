"""The run folder's lock, and the clean-up after a supervisor that was killed.

A live supervisor holds runs/<run>/run.lock (flock) and keeps in it what a later run
needs to end what it leaves if it dies without shutting down (SIGKILL, a power cut):
its pid, start time, shared-memory segment, its games' process groups and its Wine
prefixes. The kernel drops the flock with the process, so whoever gets the lock knows
the writer is dead.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from w3async.runtime import procs
from w3async.runtime.wine import wine_own
from w3async.sync.table import list_segments, unlink_segment


class RunError(RuntimeError):
    """The run cannot go on (every slot failed, the run folder is taken, ...)."""


class RunLock:
    """runs/<run>/run.lock: held (flock) by the live supervisor; it records the pid, the
    start time and the shared-memory segment so that a later run can clean up after a
    killed one."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "run.lock"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = self.read()
            os.close(self.fd)
            raise RunError(f"run folder {run_dir} is in use by a live supervisor (pid {info.get('pid', '?')}, "
                           f"started {info.get('started', '?')}): stop it, or choose another RUN") from None
        self.previous = self.read()
        self._info: dict = {}  # what this run wrote last

    def read(self) -> dict:
        try:
            with open(self.path) as f:
                return json.loads(f.read() or "{}")
        except (OSError, ValueError):
            return {}

    def write(self, **info) -> bool:
        """Record info; False when it could not be written (a full disk): the lock is
        still held, only a later run's clean-up would know less."""
        self._info = info
        data = json.dumps(info).encode()
        try:
            os.pwrite(self.fd, data.ljust(os.fstat(self.fd).st_size), 0)  # never a moment of an empty file
            os.ftruncate(self.fd, len(data))
            os.fsync(self.fd)
            return True
        except OSError:
            return False

    def update(self, **info) -> bool:
        """Record info over what this run wrote last (a game's process groups, its prefixes)."""
        return self.write(**{**self._info, **info})

    def release(self) -> None:
        if self.fd >= 0:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)
            self.fd = -1


def cleanup_previous_run(info: dict) -> dict:
    """End what a dead supervisor left, from its lock file: its games' process groups
    (only processes that still carry its segment's name in their environment, so a
    recycled pid is never hit), the processes of its Wine prefixes that no live run
    holds, and its shared-memory segment. Returns what was done, for the events log."""
    shm = info.get("shm") or ""
    killed = []
    for pgid in info.get("pgids", []):
        for pid in procs.group_members(int(pgid)):
            if _environ_mentions(pid, shm.lstrip("/")):
                if procs.kill(pid):
                    killed.append(pid)
    wine_killed = []
    for path in info.get("wine_prefixes", []):
        lock = Path(str(path) + ".lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: no live run uses this prefix
            for pid in procs.with_env("WINEPREFIX", str(path)):
                if procs.kill(pid):
                    wine_killed.append(pid)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    # Every process of the dead run carries its table's name in its environment (W3S_SHM,
    # W3S_SHM_PATH) or maps one of its segments: a helper that left its game's process
    # group (setsid, a double fork) is found by that, not by the recorded groups.
    if shm:
        maps = procs.maps_pattern("/dev/shm/" + shm.lstrip("/") + "-", any_suffix=True)
        killed += [p for p in procs.end_marked(shm.lstrip("/").encode(), maps, since=int(info.get("born") or 0),
                                               spare=wine_own) if p not in killed]
    # The table's name prefixes every game segment it made ("<name>-<game>-<start>").
    unlinked = [s for s in list_segments(shm + "-") if unlink_segment(s)] if shm else []
    return dict(dead_pid=info.get("pid"), started=info.get("started"), killed=killed, wine_killed=wine_killed,
                shm=shm, shm_unlinked=bool(unlinked), shm_segments=unlinked)


def _environ_mentions(pid: int, needle: str) -> bool:
    return bool(needle) and needle.encode() in procs.environ(pid)
