"""Displays for Windows games (docs/hooking.md, "Windows and displays").

Every prefix has Wine's null graphics driver by default: windows are made and nothing
is shown, with no X server. A recipe with `[runtime] display = "xvfb"` gets a virtual X
server for its run instead: this module starts Debian's Xvfb on a display number it
picks itself (`-displayfd`: no race with another run's server for a number), and ends
it with the run. The prefix's graphics driver is set for each run (wine.py,
`start_services`), so one prefix used both ways stays right.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from w3async.runtime import procs

XVFB_START_TIMEOUT_S = 15.0
# Big enough for a game's window; 24-bit, as an X server on a desktop usually is.
XVFB_SCREEN = "1280x1024x24"


class DisplayError(RuntimeError):
    """The X server could not be started."""


class Xvfb:
    """A virtual X server of this run: `display` (":N") once started; stop() ends it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.display = ""
        self._log = tempfile.TemporaryFile()  # its stderr: a pipe nobody reads could fill and stop it

    def start(self) -> "Xvfb":
        """Start Xvfb and wait until it names its display; DisplayError naming the cause."""
        exe = shutil.which("Xvfb")
        if not exe:
            raise DisplayError("[runtime] display = \"xvfb\": Xvfb is not installed (apt-get install xvfb), or use "
                               "display = \"null\"")
        r, w = os.pipe()
        try:
            # -displayfd: Xvfb takes the first free display number and writes it to w once
            # it accepts connections; -nolisten tcp: local clients only.
            self.proc = subprocess.Popen(
                [exe, "-displayfd", str(w), "-screen", "0", XVFB_SCREEN, "-nolisten", "tcp", "-noreset"],
                pass_fds=(w,), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
                start_new_session=True)
            os.close(w)
            w = -1
            got = b""
            deadline = time.monotonic() + XVFB_START_TIMEOUT_S
            os.set_blocking(r, False)
            while not got.endswith(b"\n") and time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    chunk = os.read(r, 64)
                    if not chunk:
                        break
                    got += chunk
                except BlockingIOError:
                    time.sleep(0.02)
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)
        if not got.strip().isdigit():
            self.stop()
            self._log.seek(0)
            err = self._log.read()[-400:]
            raise DisplayError(f"Xvfb did not start within {XVFB_START_TIMEOUT_S:.0f} s: "
                               f"{err.decode(errors='replace').strip() or 'no display number'}")
        self.display = f":{int(got)}"
        return self

    def stop(self) -> None:
        """End the server (its process group: Xvfb alone) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            procs.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                procs.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None
