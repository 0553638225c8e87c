"""The status server: /status, /metrics, /games, the dashboard and its replay viewer.

    server = StatusServer(supervisor.watch.status_source(), host="127.0.0.1", port=8765)
    port = await server.start()     # in the supervisor's loop, after set-up
    ...
    await server.stop()             # at shutdown, before the loop ends

The HTTP side runs in a thread of its own with its own event loop (status_server.py,
its limits in http_limits.py), so that no client can take the rounds' loop. The
supervisor's loop only takes a snapshot of the live counters once a sample
(run_view.take_snapshot: plain dicts, built on that loop from the `StatusSource`) and
hands it to the thread; the thread tails the run folder's JSON-lines logs (docs/logs.md,
run_files.py) into numpy series (series.py), builds the responses once per snapshot
(run_view.RunView) and serves those bytes. No route changes the run. Schemas and
limits: docs/status.md.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from pathlib import Path

from w3async.observe.http_limits import Limits, allowed_hosts, connection_cap, is_loopback
from w3async.observe.logs import console
from w3async.observe.run_view import RunView, StatusSource, take_snapshot
from w3async.observe.status_server import HttpThread


class StatusError(RuntimeError):
    """The server cannot start (the port is taken, the address is wrong)."""


class PublishedView:
    """What the supervisor's loop may ask of the server (`server.view`): the last /status
    dict and /games list the server thread built (never changed once built), also
    after stop(). `refresh()` does nothing once the thread has started: it refreshes
    once a sample. Before start() it reads the files itself."""

    def __init__(self, server: StatusServer):
        self.server = server
        self.run_dir = server.run_view.run_dir

    def refresh(self) -> None:
        if self.server.thread is None:  # no thread has owned the view: it is ours
            self.server.run_view.refresh()

    def status(self) -> dict:
        http = self.server.thread
        return self.server.run_view.status() if http is None or http.published is None else http.published

    def games(self) -> list[dict]:
        http = self.server.thread
        return self.server.run_view.games() if http is None or http.published_games is None else http.published_games


class StatusServer:
    """The status server. start() binds (StatusError when the port is taken), starts the
    server thread and, for a live source, a sampler task on the caller's loop that
    hands the thread a snapshot every `sample_s`; stop() ends both.

    `limits` (http_limits.Limits) bound what clients may take; `allowed_hosts` adds
    Host header names beyond localhost, 127.0.0.1, [::1] and the bound host (with a
    wildcard bind, the machine's name is added)."""

    def __init__(self, source: StatusSource | None = None, run_dir: Path | None = None, host: str = "127.0.0.1",
                 port: int = 0, sample_s: float = 1.0, limits: Limits | None = None,
                 allowed_hosts: tuple[str, ...] = (), events=None):
        if source is None and run_dir is None:
            raise ValueError("StatusServer needs a source or a run_dir")
        self.source = source
        self.run_view = RunView(Path(run_dir) if run_dir else source.run_dir, None, live=source is not None)
        """The view the server builds from: the server thread's alone from start() until
        stop() has ended the thread (read `view` meanwhile)."""
        self.view = PublishedView(self)
        self.host, self.port = host, port
        self.sample_s = sample_s
        self.limits = limits or Limits()
        self.extra_hosts = tuple(allowed_hosts)
        self.events = events  # the run's JsonLog: a bind beyond loopback is recorded there (None: not)
        self.max_connections: int | None = None
        self.warning: str | None = None
        self._http: HttpThread | None = None  # while serving
        self.thread: HttpThread | None = None  # the server thread that owns (or owned) run_view
        self._task: asyncio.Task | None = None
        self.sample_error: str | None = None

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}/"

    @property
    def counters(self) -> dict:
        """Requests served, limited (429), refused (503), wrong_host (421), timed_out, builds."""
        return dict(self.thread.counters) if self.thread else {}

    async def start(self) -> int:
        """Bind host:port (0: a free port), serve from the server thread, start sampling;
        returns the port."""
        if self._http is not None:
            raise StatusError("StatusServer.start() called twice: call stop() first")
        sock = bind_status(self.host, self.port)
        addr = sock.getsockname()
        self.port = addr[1]
        slots = len(self.source.games()) if self.source is not None else 0
        self.max_connections = connection_cap(self.limits, slots, backlog=128)
        extra = self.extra_hosts
        if not is_loopback(addr[0]):
            self._warn_exposed(addr[0])
            if addr[0] in ("0.0.0.0", "::"):
                extra += (socket.gethostname(),)
        if self.source is not None:
            self.run_view.feed(take_snapshot(self.source))  # before the thread owns the view
        http = HttpThread(self.run_view, self.limits, self.max_connections, allowed_hosts(self.host, self.port, extra),
                          tick_s=None if self.source is not None else self.sample_s, url=self.url,
                          write_url_file=self.source is not None)
        self.thread = http
        await asyncio.get_running_loop().run_in_executor(None, http.start, sock)
        self._http = http
        if self.source is not None:
            self._task = asyncio.create_task(self._sampler())
        return self.port

    def _warn_exposed(self, addr: str) -> None:
        self.warning = (f"status server: listening on {addr}, beyond this machine: anyone who can reach port "
                        f"{self.port} sees the run (bind 127.0.0.1 to keep it local)")
        console(f"w3async: warning: {self.warning}")
        if self.events is not None:
            self.events.warning("status_exposed", host=self.host, address=addr, port=self.port)

    async def refresh_now(self, now: float | None = None) -> None:
        """On the source's loop: a snapshot now (its time `now`), built and serving when
        this returns (tests; a last word before stop())."""
        if self._http is None:
            return
        snap = take_snapshot(self.source, now) if self.source is not None else None
        await self._http.apply(snap)

    async def stop(self) -> None:
        """Stop sampling and serving (open requests get ~1 s). Safe to call twice."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._http is not None:
            http, self._http = self._http, None
            await http.stop()

    async def _sampler(self) -> None:
        """On the source's loop: a snapshot every sample_s, handed to the thread."""
        while True:
            await asyncio.sleep(self.sample_s)
            try:
                self._http.submit(take_snapshot(self.source))
            except Exception as e:  # noqa: BLE001 (the server outlives a bad sample)
                self.sample_error = repr(e)


def bind_status(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or StatusError naming both and the fix."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise StatusError(f"status server: cannot resolve host {host!r}: {e}") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only, never a live listener
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise StatusError(f"status server: port {port} on {host} is in use: stop what holds it, choose "
                              f"another port, or use port 0 for a free one") from None
        raise StatusError(f"status server: bind({host}, {port}) failed: {e.strerror}") from None
    sock.setblocking(False)
    return sock
