"""An X display for windowed Windows games under Wine (pong, snake): Wine creates a
window only through a display driver, and with no $DISPLAY CreateWindow fails with
error 1400 (ERROR_INVALID_WINDOW_HANDLE). The prefix's desktop (explorer.exe) is
started by each run with the environment of that moment, so $DISPLAY must be set
before the run starts."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ..conftest import need


@pytest.fixture(scope="module")
def display():
    """$DISPLAY as it is, or a private Xvfb (its number chosen by Xvfb, -displayfd)
    for the module's tests, ended by its pid afterwards."""
    if os.environ.get("DISPLAY"):
        yield os.environ["DISPLAY"]
        return
    xvfb = shutil.which("Xvfb")
    need("Xvfb", xvfb is not None, "apt-get install xvfb")
    r, w = os.pipe()
    proc = subprocess.Popen([xvfb, "-displayfd", str(w), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()
    if not number:
        proc.kill()
        proc.wait()
        pytest.fail("Xvfb -displayfd gave no display number")
    mp = pytest.MonkeyPatch()
    mp.setenv("DISPLAY", f":{number}")
    try:
        yield f":{number}"
    finally:
        mp.undo()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
