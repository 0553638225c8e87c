"""structlog JSON lines in the run folder, one file per stream.

Each line is one JSON object with at least `ts` (ISO 8601, UTC), `event` and `level`.
Schemas: docs/logs.md. Loggers here are not structlog's global configuration: the
tests start several supervisors in one process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import structlog

_PROCESSORS = [
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    structlog.processors.JSONRenderer(sort_keys=False),
]


class JsonLog:
    """A JSON-lines log that flushes every line (a killed run keeps what it wrote)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "a", buffering=1, encoding="utf-8")
        self.log = structlog.wrap_logger(structlog.WriteLogger(self._file), processors=_PROCESSORS)

    def info(self, event: str, **kw) -> None:
        self.log.info(event, **kw)

    def warning(self, event: str, **kw) -> None:
        self.log.warning(event, **kw)

    def error(self, event: str, **kw) -> None:
        self.log.error(event, **kw)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def console(line: str) -> None:
    """The one-line progress report and the run's last word, on stderr."""
    print(line, file=sys.stderr, flush=True)
