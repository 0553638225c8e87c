"""A process's state from /proc/<pid>/stat: one rule, shared by the runtime (its
clean-ups, w3async.runtime.procs) and the status reader (is a run's supervisor alive),
which must not import the runtime.

Zombies count as gone: a zombie runs nothing and holds no resource but its pid, and in a
container whose init does not reap, orphans stay zombies for good.
"""

from __future__ import annotations

GONE_STATES = (b"Z", b"X")  # zombie, dead


def stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/<pid>/stat's fields after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in GONE_STATES
