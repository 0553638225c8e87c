"""A stack dump of every thread on SIGUSR1: `kill -USR1 <supervisor pid>` appends it to
runs/<run>/threads.txt and writes it to stderr; the run goes on.

Two parts, so that a dump comes even when the loop's thread is stuck:
  - faulthandler (C, at the signal): every thread's Python stack to threads.txt at once,
    each headed "Thread 0x<id>" (Python 3.11's faulthandler prints no names);
  - then, chained, the loop's handler (loop.add_signal_handler: the loop wakes for it): every
    thread by name ("w3s-learner", "w3s-infer_0", "w3s-tensorboard", "w3s-video",
    "w3async-status", "MainThread": the event loop, ...) with its id and stack, to
    threads.txt and stderr. The ids match faulthandler's.
"""

from __future__ import annotations

import faulthandler
import signal
import os
import sys
import threading
import time
import traceback
from pathlib import Path

DUMP_FILE = "threads.txt"  # in the run folder


def named_dump() -> str:
    """Every live thread's name, id and stack, the main thread first."""
    frames = sys._current_frames()
    out = [f"--- threads of pid {os.getpid()} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} ---"]
    for t in sorted(threading.enumerate(), key=lambda t: t is not threading.main_thread()):
        out.append(f'Thread 0x{t.ident:016x} "{t.name}"{" (daemon)" if t.daemon else ""}:')
        frame = frames.get(t.ident)
        out.append("".join(traceback.format_stack(frame)).rstrip() if frame is not None else "  (no Python frame)")
    return "\n".join(out) + "\n"


class StackDump:
    """SIGUSR1's dump for one run folder, on `loop` (the main thread's: signal handlers
    are the main thread's); `close()` removes both handlers."""

    def __init__(self, run_dir: Path, loop):
        self.path = Path(run_dir) / DUMP_FILE
        self._loop = loop
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (faulthandler keeps its descriptor)
        loop.add_signal_handler(signal.SIGUSR1, self._on_signal)
        # after the loop's: faulthandler's C handler runs first, then chains to the loop's
        faulthandler.register(signal.SIGUSR1, file=self._file, all_threads=True, chain=True)

    @classmethod
    def install(cls, run_dir: Path, loop) -> StackDump | None:
        """The dump, when called on the main thread (signal handlers are its own), else None."""
        return cls(run_dir, loop) if threading.current_thread() is threading.main_thread() else None

    def _on_signal(self) -> None:
        text = named_dump()
        for f in (self._file, sys.stderr):
            try:
                f.write(text)
                f.flush()
            except (OSError, ValueError):  # a closed stderr must not end the run
                pass

    def close(self, ignore: bool = False) -> None:
        """Remove both handlers (idempotent); with `ignore`, SIGUSR1 is then ignored instead of
        its default action (ending the process)."""
        if self._file.closed:
            return
        faulthandler.unregister(signal.SIGUSR1)
        if not self._loop.is_closed():
            self._loop.remove_signal_handler(signal.SIGUSR1)
        if ignore:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self._file.close()
