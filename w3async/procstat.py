"""A process's state from /proc/<pid>/stat and its environment: one reading, shared by
the runtime (its clean-ups, w3async.runtime.procs), the status reader (is a run's
supervisor alive) and the accounting's /proc reader (observe/proc_sampler.py), which
must not import the runtime.

Zombies count as gone: a zombie runs nothing and holds no resource but its pid, and in a
container whose init does not reap, orphans stay zombies for good.
"""

from __future__ import annotations

GONE_STATES = (b"Z", b"X")  # zombie, dead


def read_stat(path: str) -> tuple[str, list[bytes]] | None:
    """A stat file of /proc (a process's or a thread's): its command name and the fields
    after it (state first), or None. The name may hold spaces and ')': it ends at the
    last ')'."""
    try:
        with open(path, "rb") as f:
            head, paren, tail = f.read().rpartition(b")")
    except OSError:
        return None
    return (head.partition(b"(")[2].decode(errors="replace"), tail.split()) if paren else None


def stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/<pid>/stat's fields after the command name (state first), or None."""
    got = read_stat(f"/proc/{pid}/stat")
    return got[1] if got is not None else None


def environ(pid: int) -> bytes:
    """The process's environment block (b'' when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] not in GONE_STATES
