"""A run's life and what its parts share: `RunLife` (asked to stop, shutting down,
hurried, its cause) and `RunContext` (the recipe, the run folder, the events log, the
loop, the life, the fault barrier).

The Supervisor makes them at set-up and hands each part (the game keeper, the watch,
RunControl, the shutdown's steps, the cluster link) the context and the pieces it uses,
never the Supervisor itself: a part's constructor is its contract.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from w3async.observe.logs import JsonLog
from w3async.recipes import Recipe


class RunLife:
    """Whether the run goes on. `stop_requested`: a stop condition, a signal or a fault
    asked it to end; `stopping`: the shutdown has begun (no new rounds, no answers
    written); `hurrying`: a second signal came during the shutdown (its waits shorten);
    `error`: the run's cause, the first one given."""

    def __init__(self):
        self.stop = asyncio.Event()
        self.stopping = False
        self.hurrying = False
        self.error: str | None = None

    @property
    def stop_requested(self) -> bool:
        return self.stop.is_set()

    def fail(self, reason: str | None) -> None:
        """End the run with this cause, unless it has one (None: a plain stop)."""
        if reason and not self.error:
            self.error = reason
        self.stop.set()

    def request_stop(self) -> None:
        """End the run normally (SIGINT, SIGTERM, a stop condition)."""
        self.fail(None)


@dataclass(frozen=True)
class RunContext:
    """What every part of one run uses. `barrier(where, fn, *args)` runs a loop callback
    through the run's fault barrier; `task(coro, where)` makes a task whose error goes
    through it (supervisor.py)."""

    recipe: Recipe
    run_dir: Path
    events: JsonLog
    loop: asyncio.AbstractEventLoop
    life: RunLife
    barrier: Callable[..., None]
    task: Callable[..., asyncio.Task]
