"""A stack dump of every thread on SIGUSR1: `kill -USR1 <supervisor pid>` appends it to
runs/<run>/threads.txt and writes it to stderr; the run goes on.

The loop's handler (loop.add_signal_handler: the loop wakes for it) writes every thread by
name ("w3s-learner", "w3s-infer_0", "w3s-tensorboard", "w3s-video", "w3async-status",
"MainThread": the event loop, ...) with its id and stack, read under the GIL
(sys._current_frames).

Not faulthandler's dump at the signal (tried and dropped): it walks the other threads'
frames from the C handler without the GIL while they run, and a run ended by SIGSEGV after
74 signals 50 ms apart (learning on two null games); with the loop's handler alone, 1195
signals and the run went on. A loop stuck in C is read from outside: `py-spy dump --pid`.
"""

from __future__ import annotations

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
    are the main thread's); `close()` removes the handler."""

    def __init__(self, run_dir: Path, loop):
        self.path = Path(run_dir) / DUMP_FILE
        self._loop = loop
        self._file = open(self.path, "a", buffering=1)  # noqa: SIM115 (open until close())
        loop.add_signal_handler(signal.SIGUSR1, self._on_signal)

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
        """Remove the handler (idempotent); with `ignore`, SIGUSR1 is then ignored instead of
        its default action (ending the process)."""
        if self._file.closed:
            return
        if not self._loop.is_closed():
            self._loop.remove_signal_handler(signal.SIGUSR1)
        if ignore:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        self._file.close()
