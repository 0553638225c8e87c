"""The one choice of event loop: uvloop's where it is installed (the package depends on
it; a source checkout without it still runs), else asyncio's. The supervisor's loop, the
status server's thread, the env's and eval's runs all take theirs from here."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def new_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of the chosen kind (not set as the thread's)."""
    try:
        import uvloop  # noqa: PLC0415
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run on a loop of the chosen kind."""
    with asyncio.Runner(loop_factory=new_loop) as runner:
        return runner.run(coro)
