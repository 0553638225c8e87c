"""The status server's HTTP side: its own thread, its own event loop, cached bytes.

The supervisor's loop runs the inference rounds; nothing here runs on it. `HttpThread`
starts a thread with an event loop of its own (uvloop when installed) and an aiohttp
AppRunner in it. The supervisor's loop hands it snapshots (plain dicts, built there
from the live objects) with `submit()`; the thread never reads the supervisor's
objects. On each snapshot (or, serving a finished run's files, on its own timer) the
thread tails the run's logs, builds the /status and /games bodies once, and serves
those bytes to every request until the next one; /metrics and /series are built at most
once per snapshot, on first demand; a replay is converted once per file change.

The limits (docs/status.md, "Limits"; their figures and checks in http_limits.py): a
request costs one dict lookup and a write of bytes already built, and the thread
answers at most `total_rate` requests a second (`ip_rate` per client address): beyond
that a request waits its turn, and one that would wait longer than `max_wait_s` gets
429 after `reject_delay_s` (so a client looping on 429s is held to one a second per
connection). Connections beyond `max_connections` get a fixed 503 and are closed at
once. A connection that sends no complete request within `idle_timeout_s` of opening or
of its last answer is closed. The Host header, and the host of a request target in
absolute form (`GET http://HOST/status`), must name the bound address (421 otherwise:
DNS rebinding).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from pathlib import Path

from aiohttp import web

from w3async.files import atomic_write_text, discard
from w3async import eventloop
from w3async.observe.http_limits import Limits, RateGate, inside, target_authority
from w3async.observe.replay_view import ReplayError, replay_view
from w3async.observe.run_view import SCHEMA
from w3async.observe.video import VIDEO_DIR, VIDEO_NAME
from w3async.observe.status_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE, metrics_text
from w3async.run_folder import RunFolder

STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = {"dashboard.js": "text/javascript", "viewer.js": "text/javascript", "dashboard.css": "text/css"}
# The page may load only what this server serves: no outside host, ever.
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

# aiohttp logs a malformed request (a port scanner, a huge header) with a traceback on
# its server logger, which Python prints on stderr: the run's console. The client gets
# its 400 anyway; the console stays for the progress line.
HTTP_LOG = logging.getLogger("w3async.observe.status.http")
HTTP_LOG.propagate = False
HTTP_LOG.addHandler(logging.NullHandler())

REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           b"Connection: close\r\nContent-Length: 45\r\n\r\n"
           b'{"error": "too many connections: try again"}\n')
assert len(b'{"error": "too many connections: try again"}\n') == 45


class _Connection(asyncio.Protocol):
    """One counted connection in front of aiohttp's handler for it. The handler comes
    from `AppRunner.server`, aiohttp's low-level server, which is the public protocol
    factory (`server()`); this wrapper only counts the connection and closes it when no
    whole request arrived `idle_timeout_s` after it opened (`requested()`, called by the
    middleware, stops that clock). Every protocol call is handed on unchanged."""

    def __init__(self, http: HttpThread, handler: asyncio.Protocol):
        self.http = http
        self.handler = handler
        self.counted = True
        self.first: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.handler.connection_made(transport)
        self.first = asyncio.get_running_loop().call_later(self.http.limits.idle_timeout_s, self.no_request)

    def requested(self) -> None:
        if self.first is not None:
            self.first.cancel()
            self.first = None

    def no_request(self) -> None:
        """Nothing whole arrived in time: a half-open connection, or slow headers."""
        self.first = None
        self.http.counters["timed_out"] += 1
        self.handler.force_close()

    def data_received(self, data: bytes) -> None:
        self.handler.data_received(data)

    def eof_received(self):
        return self.handler.eof_received()

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def connection_lost(self, exc) -> None:
        self.requested()
        if self.counted:
            self.counted = False
            self.http.open_connections -= 1
        self.handler.connection_lost(exc)


class _Refused(asyncio.Protocol):
    """A connection beyond the cap: a fixed 503, closed at once."""

    def connection_made(self, transport) -> None:
        transport.write(REFUSED)
        transport.close()


class HttpThread:
    """The server thread. `start(sock)` serves sock from a new thread (returns once it
    serves); `submit(snapshot)` and `apply(snapshot)` hand it a snapshot from another
    thread; `stop()` ends it. `view` (a status.RunView) belongs to the thread once
    started: nothing else may touch it."""

    def __init__(self, view, limits: Limits, cap: int, hosts: set[str], tick_s: float | None, url: str,
                 write_url_file: bool):
        self.view = view
        self.limits, self.cap, self.hosts = limits, cap, hosts
        self.tick_s = tick_s  # serving files: the thread refreshes on its own timer
        self.url, self.write_url_file = url, write_url_file
        self.open_connections = 0
        self.counters = dict(served=0, limited=0, refused=0, wrong_host=0, timed_out=0, builds=0)
        self.published: dict | None = None  # the last /status dict (read by other threads, never changed)
        self.published_games: list | None = None
        self.error: str | None = None  # the last failed build
        self.url_file: Path | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.native_id: int | None = None
        self._bodies: dict[str, bytes] = {}
        self._lazy: dict[str, tuple[int, bytes]] = {}
        self._gen = 0
        self._replay_key = None  # (path, mtime) or ("error", message)
        self._replay: tuple | None = None  # (key, status, body)
        self._replay_job: asyncio.Future | None = None
        self._replay_job_key = None
        self._ip = RateGate(limits.ip_rate, limits.ip_burst)
        self._all = RateGate(limits.total_rate, limits.total_burst)
        self._static = {name: (STATIC / name).read_bytes() for name in [*STATIC_FILES, "dashboard.html"]}
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.AbstractServer | None = None
        self._ticker: asyncio.Task | None = None

    # ---- lifecycle (called from the owner's thread) -----------------------------------

    def start(self, sock) -> None:
        ready = threading.Event()
        failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._main, args=(sock, ready, failed), name="w3async-status",
                                        daemon=True)
        self._thread.start()
        ready.wait()
        if failed:
            self._thread.join()
            raise failed[0]

    def _main(self, sock, ready: threading.Event, failed: list) -> None:
        self.native_id = threading.get_native_id()  # /proc/self/task/<id>: the thread's CPU time (bench)
        loop = eventloop.new_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(sock))
        except BaseException as e:  # noqa: BLE001 (handed to start())
            failed.append(e)
            sock.close()
            ready.set()
            loop.close()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, sock) -> None:
        self._build()
        app = web.Application(client_max_size=1024, middlewares=[self._middleware])
        for path, handler in (("/", self._page), ("/status", self._cached), ("/games", self._cached),
                              ("/metrics", self._metrics), ("/series", self._series),
                              ("/replay/latest", self._replay_route), ("/static/{name}", self._static_route),
                              ("/videos/{name}", self._video_route)):
            app.router.add_get(path, handler)
        lim = self.limits
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, logger=HTTP_LOG,
                                     keepalive_timeout=lim.idle_timeout_s, lingering_time=1.0, shutdown_timeout=1.0)
        await self._runner.setup()
        # Not web.SockSite: its protocol factory is aiohttp's, and a connection beyond the
        # cap must be refused before a handler exists for it. Ours asks the runner's
        # low-level server (a protocol factory, public) for each handler it keeps.
        server = self._runner.server

        def factory():
            if self.open_connections >= self.cap:
                self.counters["refused"] += 1
                return _Refused()
            self.open_connections += 1
            return _Connection(self, server())

        self._listener = await asyncio.get_running_loop().create_server(factory, sock=sock, backlog=128)
        if self.tick_s:
            self._ticker = asyncio.create_task(self._tick_files())

    def submit(self, snapshot: dict) -> None:
        """From another thread: build from this snapshot soon."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._build, snapshot)

    async def apply(self, snapshot: dict | None) -> None:
        """From another loop: build from this snapshot and wait until it serves."""
        async def job():
            self._build(snapshot)
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(job(), self.loop))

    async def stop(self) -> None:
        """From another loop: close the server and end the thread."""
        if self._thread is None:
            return
        thread, self._thread = self._thread, None

        async def down():
            if self._ticker is not None:
                self._ticker.cancel()
            self._listener.close()
            await self._runner.cleanup()
            # requests still waiting their turn (or their 429) end here, with the loop
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(down(), self.loop))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 5.0)
        if self.url_file is not None:
            discard(self.url_file)
            self.url_file = None

    # ---- building (in the thread) -------------------------------------------------

    async def _tick_files(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            self._build()

    def _build(self, snapshot: dict | None = None) -> None:
        """Once per snapshot: the logs' new lines, the /status and /games bodies, the replay's key."""
        v = self.view
        try:
            if snapshot is not None:
                v.feed(snapshot)
            v.refresh()
            st = v.status()
            games = v.games()
            self._bodies = {"/status": _dumps(st), "/games": _dumps(dict(schema=SCHEMA, games=games))}
            self.published, self.published_games = st, games
            self._replay_key = self._replay_lookup(v.latest_replay())
            self._gen += 1
            self.counters["builds"] += 1
            now = time.monotonic()
            self._ip.prune(now)
            if self.write_url_file and self.url_file is None and v.run_dir.is_dir():
                path = RunFolder(v.run_dir).status_url
                atomic_write_text(path, self.url + "\n")
                self.url_file = path
        except Exception as e:  # noqa: BLE001 (the server outlives a bad build; the last one serves)
            self.error = repr(e)

    def _replay_lookup(self, p: str | None):
        if not p:
            return ("error", "no evaluation replay yet")
        real = inside(p, self.view.run_dir)
        if real is None:
            return ("error", f"replay {p}: outside the run folder (not served)")
        try:
            return (p, os.stat(real).st_mtime_ns, real)
        except OSError as e:
            return ("error", f"replay {p}: {e.strerror}")

    def _lazy_body(self, name: str, build) -> bytes:
        gen, body = self._lazy.get(name, (-1, b""))
        if gen != self._gen:
            body = build()
            self._lazy[name] = (self._gen, body)
        return body

    # ---- serving (in the thread) --------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler):
        conn = request.transport.get_protocol() if request.transport is not None else None
        if isinstance(conn, _Connection):
            conn.requested()  # a whole request arrived: the connection's first clock stops
        host = request.headers.get("Host", "").lower()
        authority = target_authority(request.raw_path)
        if host not in self.hosts or (authority is not None and authority not in self.hosts):
            self.counters["wrong_host"] += 1
            named = f"Host {host!r}" if host not in self.hosts else f"the request target's host {authority!r}"
            return web.json_response(dict(error=f"{named} is not this server's address"), status=421,
                                     headers=SECURITY_HEADERS)
        loop = asyncio.get_running_loop()
        now = loop.time()
        ip = request.remote
        wait = max(self._ip.wait(ip, now), self._all.wait(None, now))
        if wait > self.limits.max_wait_s:
            self.counters["limited"] += 1
            await asyncio.sleep(self.limits.reject_delay_s)
            return web.json_response(dict(error="too many requests: slow down"), status=429,
                                     headers={**SECURITY_HEADERS, "Retry-After": "1"})
        self._ip.take(ip, now)
        self._all.take(None, now)
        if wait > 0:
            await asyncio.sleep(wait)
        self.counters["served"] += 1
        try:
            resp = await handler(request)
        except web.HTTPException as e:  # 404, 405 from the router
            e.headers.update(SECURITY_HEADERS)
            raise
        resp.headers.update(SECURITY_HEADERS)
        return resp

    async def _cached(self, request: web.Request) -> web.Response:
        return web.Response(body=self._bodies[request.path], content_type="application/json")

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self._lazy_body("/metrics", lambda: metrics_text(self.published).encode())
        return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def _series(self, request: web.Request) -> web.Response:
        body = self._lazy_body("/series", lambda: _dumps(dict(schema=SCHEMA, levels=list(self.view.series.eval_levels),
                                                              plots=self.view.series.plots())))
        return web.Response(body=body, content_type="application/json")

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(body=self._static["dashboard.html"], content_type="text/html", charset="utf-8")

    async def _static_route(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound(text=f"no static file {name!r}")
        return web.Response(body=self._static[name], headers={"Content-Type": STATIC_FILES[name]})

    async def _video_route(self, request: web.Request) -> web.Response:
        """An evaluation video of videos/ (a name VIDEO_NAME matches, a plain file: never a
        link out of the run folder), read off this loop."""
        name = request.match_info["name"]
        path = Path(self.view.run_dir) / VIDEO_DIR / name
        if not VIDEO_NAME.fullmatch(name) or path.is_symlink() or not path.is_file():
            return _error(f"no video {name!r}")
        body = await asyncio.get_running_loop().run_in_executor(None, path.read_bytes)
        headers = {"Content-Type": "video/mp4", "Accept-Ranges": "bytes"}
        # A Range request (a browser's seek) gets that part, 206: without it a seek played
        # from the start. A video is at most a few MiB: read whole, then cut.
        try:
            part = request.http_range
        except ValueError:  # malformed, or more than one range
            part = None
        if part is None or (part.start is None and part.stop is None):
            return web.Response(body=body, headers=headers)
        start, stop, _ = part.indices(len(body))
        if start >= stop:
            return web.Response(status=416, headers={"Content-Range": f"bytes */{len(body)}"})
        headers["Content-Range"] = f"bytes {start}-{stop - 1}/{len(body)}"
        return web.Response(status=206, body=body[start:stop], headers=headers)

    async def _replay_route(self, request: web.Request) -> web.Response:
        key = self._replay_key
        if key is None or key[0] == "error":
            return _error(key[1] if key else "no evaluation replay yet")
        if self._replay is None or self._replay[0] != key:
            if self._replay_job is None or self._replay_job_key != key:
                # A long game is ~10^4 units to convert: off this loop, once per file change.
                self._replay_job = asyncio.get_running_loop().run_in_executor(None, _replay_body, key[0], key[2])
                self._replay_job_key = key
            job = self._replay_job
            try:
                body, status = await asyncio.shield(job), 200
            except (OSError, ReplayError) as e:
                body, status = _dumps(dict(error=str(e))), 404
            if self._replay is None or self._replay[0] != key:
                self._replay = (key, status, body)
        _, status, body = self._replay
        return web.Response(body=body, status=status, content_type="application/json")


def _replay_body(path: str, real: str) -> bytes:
    view = replay_view(Path(real))
    view.setdefault("meta", {})["path"] = path
    return json.dumps(view, separators=(",", ":")).encode()


def _dumps(body) -> bytes:
    return json.dumps(body, allow_nan=False).encode()


def _error(msg: str, status: int = 404) -> web.Response:
    return web.Response(body=_dumps(dict(error=msg)), status=status, content_type="application/json")
