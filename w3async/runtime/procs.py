"""Processes as /proc shows them: what the supervisor and the clean-ups look for.

Zombies count as gone everywhere here (w3async.procstat: the rule, and `alive`, shared
with the status reader).
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator

from w3async.procstat import GONE_STATES, alive, environ, stat_fields  # noqa: F401 (alive, environ: part of this API)


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


def with_env(key: str, value: str) -> list[int]:
    """Live processes with key=value in their environment."""
    needle = f"{key}={value}".encode()
    return [pid for pid, _ in live_processes() if needle in environ(pid).split(b"\0")]


def mentioning(needle: bytes) -> list[int]:
    """Live processes whose environment block contains needle (a run's marker: what a
    game's helpers inherit even when they leave its process group)."""
    me = os.getpid()
    return [pid for pid, _ in live_processes() if pid != me and needle and needle in environ(pid)]


def started(pid: int) -> int:
    """When the process started (clock ticks since boot, /proc/PID/stat's starttime);
    0 when it is gone."""
    return _ticks(stat_fields(pid) or [])


def maps_pattern(path: str, any_suffix: bool = False) -> re.Pattern:
    """What /proc/PID/maps shows for a process that maps the file at path, deleted since
    or not; any_suffix: any file whose path starts with it (a run's segments)."""
    tail = rb"[^\n]*" if any_suffix else rb"(?: \(deleted\))?$"
    return re.compile(rb" " + re.escape(path.encode()) + tail, re.M)


def _maps(pid: int, pattern: re.Pattern) -> bool:
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return pattern.search(f.read()) is not None
    except OSError:
        return False


def _marked(env: bytes, maps: re.Pattern | None, since: int) -> Iterator[int]:
    me = os.getpid()
    for pid, f in sorted(live_processes(), key=lambda pf: -_ticks(pf[1])):
        if pid != me and _ticks(f) >= since and ((env and env in environ(pid)) or (maps and _maps(pid, maps))):
            yield pid


def _ticks(fields: list[bytes]) -> int:
    return int(fields[19]) if len(fields) > 19 else 0


def marked(env: bytes, maps: re.Pattern | None = None, since: int = 0) -> list[int]:
    """Live processes but this one, newest first, started at or after `since` (ticks),
    that carry `env` in their environment block or whose memory maps match `maps`
    (maps_pattern). The mapping finds a helper that left the game's process group and
    scrubbed its environment while it still writes to the game's segment."""
    return list(_marked(env, maps, since))


def end_marked(env: bytes, maps: re.Pattern | None = None, since: int = 0, spare=lambda pid: False,
               passes: int = 50) -> list[int]:
    """SIGKILL what marked() finds (but what `spare` spares) the moment it is found, newest
    first, and look again until a look finds nothing new, at most `passes` looks: a
    helper that double-forks, or forks anew to flee, is elsewhere by the time one look
    at /proc is done (a single look left such helpers alive, and the leftover check then
    said nothing was left). Returns the pids killed."""
    killed: list[int] = []
    for _ in range(passes):
        hit = [pid for pid in _marked(env, maps, since) if pid not in killed and not spare(pid) and kill(pid)]
        if not hit:
            break
        killed += hit
    return killed


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
