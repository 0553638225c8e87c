"""What a run shows while it runs: the status server, inference.jsonl's round lines once
a second, and the console's progress line.

`RunWatch` starts and stops the status server (observe/status.py) for its host, the
Supervisor, and runs the two once-a-while tasks the supervisor starts with the games.
It works through the host's public members only (recipe, events, answerer, keeper,
agent_steps, started_monotonic, stop_requested).
"""

from __future__ import annotations

import asyncio
import time

from w3async.observe.logs import console
from w3async.runtime.runfolder import RunError


class RunWatch:
    """The status server and the periodic lines of one run."""

    def __init__(self, host):
        self.host = host
        self.status_server = None  # observe.status.StatusServer while it serves

    async def start_status(self) -> None:
        """Serve the run's status (recipe's [status]); RunError when the port is taken."""
        from w3async.observe.run_view import SupervisorSource  # noqa: PLC0415 (aiohttp only where a run serves)
        from w3async.observe.status import StatusError, StatusServer  # noqa: PLC0415

        h = self.host
        st = h.recipe.status
        self.status_server = StatusServer(SupervisorSource(h), host=st.host, port=st.port)
        try:
            port = await self.status_server.start()
        except StatusError as e:
            self.status_server = None
            raise RunError(str(e)) from None
        h.events.info("status_server", url=self.status_server.url, port=port)
        if h.recipe.supervisor.progress_s:
            console(f"w3async: {h.recipe.name} status on {self.status_server.url}")

    async def stop_status(self) -> None:
        """The shutdown's first step (safe when none serves)."""
        if self.status_server is not None:
            await self.status_server.stop()

    async def log_rounds(self) -> None:
        """Once a second: the answerer's round statistics into inference.jsonl."""
        while not self.host.stop_requested:
            await asyncio.sleep(1.0)
            self.host.answerer.flush_round_stats()

    async def progress(self) -> None:
        """Every progress_s: one console line (the status view's summary when it serves)."""
        h = self.host
        every = h.recipe.supervisor.progress_s
        if not every:
            return
        last_t, last_steps = time.monotonic(), 0
        while not h.stop_requested:
            await asyncio.sleep(every)
            now = time.monotonic()
            rate = (h.agent_steps - last_steps) / max(now - last_t, 1e-9)
            last_t, last_steps = now, h.agent_steps
            if self.status_server is not None:
                from w3async.observe.progress import progress_line  # noqa: PLC0415

                self.status_server.view.refresh()
                console(progress_line(self.status_server.view.status()))
                continue
            line = (f"w3async {h.recipe.name} | {now - h.started_monotonic:7.1f} s | {h.agent_steps:,} steps | "
                    f"{rate:,.0f} steps/s | {h.summary_games()}")
            more = h.answerer.progress()
            console(line + (f" | {more}" if more else ""))
