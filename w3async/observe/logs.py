"""structlog JSON lines in the run folder, one file per stream.

Each line is one JSON object with at least `ts` (ISO 8601, UTC), `event` and `level`.
Schemas: docs/logs.md. Loggers here are not structlog's global configuration: the
tests start several supervisors in one process.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import structlog

_PROCESSORS = [
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    structlog.processors.JSONRenderer(sort_keys=False),
]


class JsonLog:
    """A JSON-lines log that flushes every line (a killed run keeps what it wrote).

    A line that cannot be written (a full disk, a folder gone read-only) is counted in
    `dropped` and said once on the console; it never raises: a log is not worth a round,
    a restart or the shutdown (docs/faults.md)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dropped = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.log = structlog.wrap_logger(structlog.ReturnLogger(), processors=_PROCESSORS)

    def _write(self, method: str, event: str, kw: dict) -> None:
        if self._fd < 0:
            self.dropped += 1
            return
        line = (getattr(self.log, method)(event, **kw) + "\n").encode()
        size = None
        try:
            size = os.fstat(self._fd).st_size
            while line:
                line = line[os.write(self._fd, line):]
        except OSError as e:
            self.dropped += 1
            if size is not None:
                try:  # no torn line: a reader sees whole lines only
                    os.ftruncate(self._fd, size)
                except OSError:
                    pass
            if self.dropped == 1:
                console(f"w3async: cannot write {self.path}: {e.strerror or e}; its lines are dropped until it can")

    def info(self, event: str, **kw) -> None:
        self._write("info", event, kw)

    def warning(self, event: str, **kw) -> None:
        self._write("warning", event, kw)

    def error(self, event: str, **kw) -> None:
        self._write("error", event, kw)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def console(line: str) -> None:
    """The one-line progress report and the run's last word, on stderr."""
    print(line, file=sys.stderr, flush=True)
