"""The run's teardown on a contextlib.AsyncExitStack, as aiohttp's runner closes its sites.

Each part of a run registers its own close the moment it is set up (supervisor.py, through
shutdown.py's register_* functions); close() unwinds them in reverse order. A close that
raises is kept in `errors` ("what: Type: message") and the rest still runs: the shutdown
record, registered near the bottom, writes them all. A run whose set-up failed half way
closes only what it had set up.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Callable


class Teardown:
    """The closes of one run, last set up first closed; every error kept."""

    def __init__(self):
        self.errors: list[str] = []
        self._stack = contextlib.AsyncExitStack()

    def push(self, what: str, fn: Callable, *args, off_loop: bool = False) -> None:
        """Close with fn(*args) (awaited when it is a coroutine; on the default executor with
        off_loop); an error is kept under `what`."""
        self._stack.push_async_callback(self.step, what, fn, *args, off_loop=off_loop)

    def push_raw(self, fn: Callable, *args) -> None:
        """Close with fn(*args), its error not caught (the record and the lock, the last ones)."""
        self._stack.push_async_callback(_call, fn, *args)

    async def step(self, what: str, fn: Callable, *args, off_loop: bool = False):
        """fn(*args) now; its result, or None with the error kept."""
        try:
            if off_loop:
                try:
                    pending = asyncio.get_running_loop().run_in_executor(None, fn, *args)
                except RuntimeError:  # the executors are stopped (the interpreter's exit): here
                    return fn(*args)
                return await pending
            r = fn(*args)
            return await r if asyncio.iscoroutine(r) else r
        except Exception as e:  # noqa: BLE001 (kept: the teardown goes on)
            self.errors.append(f"{what}: {type(e).__name__}: {e}")
            return None

    async def aclose(self) -> None:
        await self._stack.aclose()


async def _call(fn: Callable, *args) -> None:
    r = fn(*args)
    if asyncio.iscoroutine(r):
        await r
