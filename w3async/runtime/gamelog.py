"""A game's log (games/slot-N.log): its stdout and stderr, kept bounded and quoted safely.

The game writes to the file itself (no pipe: a game that prints never waits on the
supervisor's loop), through a descriptor opened O_APPEND. The game is untrusted here
too: it may print hundreds of MB, with no newline, bytes that are not UTF-8, terminal
escapes. So the supervisor reads at most TAIL_BYTES of the file's end, quotes a few
short printable lines (events.jsonl, the console, /status), and cuts the file when it
passes its cap. Before this, a crashing game's 8 MB without a newline became an 8 MB
`stderr` in events.jsonl (each of its exits quoted the whole file: a 127 MB line by
the third), the loop stalled reading it and the supervisor's RSS reached 700 MiB.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

START = "--- start "  # the line the supervisor writes before each start
TAIL_BYTES = 64 * 1024  # what tail() reads of the file's end
KEEP_BYTES = 64 * 1024  # what a cut keeps of the file's end
LINE_CHARS = 300  # a quoted line's length at most


def open_for_start(path: Path, start: int):
    """The log opened for appending (the game's stdout and stderr), after a line that
    marks this start. The marker gets a line of its own even when the last start's
    output ended without a newline, so that tail() can find where this start began."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "ab")
    lead = b"\n" if log.tell() and not _ends_with_newline(path) else b""
    log.write(lead + f"{START}{start} at {time.strftime('%H:%M:%S')}\n".encode())
    log.flush()
    return log


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def tail(path: Path, n: int = 3) -> str:
    """The last n lines the current start printed, joined by ' | ': only the file's last
    TAIL_BYTES are read, each line is cut to LINE_CHARS and made printable (control
    characters, escapes included, written as \\xNN; bytes that are not UTF-8 as U+FFFD)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - TAIL_BYTES))
            data = f.read(TAIL_BYTES)
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()
    starts = [i for i, x in enumerate(lines) if x.startswith(START)]
    lines = [x for x in lines[starts[-1] + 1 if starts else 0 :] if x.strip() and not x.startswith("--- ")]
    return " | ".join(printable(x[:LINE_CHARS]) for x in lines[-n:])


def printable(s: str) -> str:
    """s with every character that is not printable written as \\xNN (\\uNNNN): a game's
    terminal escapes never reach the operator's terminal."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
                   for c in s)


def cap(path: Path, max_bytes: int) -> int:
    """Cut the log to its last KEEP_BYTES when it is over max_bytes; returns the bytes
    cut (0: none). Copy-and-truncate, as logrotate's copytruncate: the game keeps its
    descriptor, O_APPEND, and writes on at the new end; what it writes between the copy
    and the truncation is lost, which a game printing this much can spare."""
    try:
        if os.stat(path).st_size <= max_bytes:  # the watch asks of every log twice a second: one call
            return 0
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        size = os.fstat(fd).st_size
        if size <= max_bytes:
            return 0
        kept = os.pread(fd, KEEP_BYTES, max(0, size - KEEP_BYTES))
        os.ftruncate(fd, 0)
        cut = size - len(kept)
        note = f"--- {cut:,} bytes cut here: this log keeps at most {max_bytes:,} bytes\n".encode()
        os.write(fd, note + kept)  # O_APPEND: after whatever the game wrote since the truncation
        return cut
    except OSError:
        return 0
    finally:
        os.close(fd)
