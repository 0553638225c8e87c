"""The status server: /status, /metrics, /games, the dashboard and its replay viewer.

    server = StatusServer(SupervisorSource(supervisor), host="127.0.0.1", port=8765)
    port = await server.start()     # in the supervisor's loop, after set-up
    ...
    await server.stop()             # at shutdown, before the loop ends

It runs in the supervisor's loop and only reads: the live counters of a `StatusSource`
(sampled once a second: steps/s come from deltas, not a running mean) and the run
folder's JSON-lines logs (docs/logs.md), tailed incrementally into numpy series
(series.py) so that a request costs the same at 100 and at 100,000 episodes. No route
changes the run. Schemas: docs/status.md.

`RunView` is the same picture without a server: `status_cli.py` builds one from a
run's files alone, live or finished.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import json
import logging
import math
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol, runtime_checkable

from aiohttp import web

from .replay_view import ReplayError, replay_view  # noqa: F401 (ReplayError: part of this API)
from .series import AI_LEVELS, RunFiles, RunSeries

SCHEMA = 1
URL_FILE = "status.url"  # in the run folder while a live server serves it
REPLAY_DIR = "replays"  # where recipes point the eval games' W3D_RECORD_DIR
REPLAY_SUFFIXES = (".w3dr", ".json")
STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = {"dashboard.js": "text/javascript", "viewer.js": "text/javascript", "dashboard.css": "text/css"}
# The page may load only what this server serves: no outside host, ever.
CSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'"


# aiohttp logs a malformed request (a port scanner, a huge header) with a traceback on
# its server logger, which Python prints on stderr: the run's console. The client gets
# its 400 anyway; the console stays for the progress line.
_HTTP_LOG = logging.getLogger("w3async.status.http")
_HTTP_LOG.propagate = False
_HTTP_LOG.addHandler(logging.NullHandler())


class StatusError(RuntimeError):
    """The server cannot start (the port is taken, the address is wrong)."""


@runtime_checkable
class StatusSource(Protocol):
    """What the server asks the live run for (the supervisor implements it, or wraps
    itself in SupervisorSource). Both calls run on the loop and must not block."""

    run_dir: Path
    """The run folder: its logs feed the series (docs/logs.md)."""

    def stats(self) -> dict:
        """Counters, as Supervisor.stats() returns them: agent_steps, rounds,
        rows_per_round, seconds, cpu_s, bad_rows, restarts {cause: n},
        games {index: {pid, state, restarts, causes}}."""

    def games(self) -> list[dict]:
        """One dict per game slot with GAME_KEYS (docs/status.md, "/games")."""


GAME_KEYS = ("slot", "pid", "runtime", "role", "lanes", "sides", "state", "restarts", "causes", "steps", "last_step_age_s")


class SupervisorSource:
    """StatusSource over a Supervisor (reads its slots; changes nothing)."""

    def __init__(self, sup):
        self.sup = sup
        self.run_dir = Path(sup.run_dir)

    def stats(self) -> dict:
        return self.sup.stats()

    def games(self) -> list[dict]:
        now = time.monotonic()
        return [dict(slot=s.index, pid=s.pid, runtime=s.group.runtime, role=getattr(s.group, "role", None),
                     lanes=s.group.lanes, sides=s.group.sides,
                     state=s.state, restarts=s.restarts, causes=dict(s.causes), steps=int(s.seq_sum),
                     last_step_age_s=round(now - s.progress_at, 3) if s.progress_at else None)
                for s in self.sup.slots]


def _f(x, nd: int = 3):
    """A finite float rounded, or None (JSON has no NaN)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return round(v, nd) if math.isfinite(v) else None


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z") if t else None


class RunView:
    """A run's status from its files and, when live, its StatusSource."""

    FOLDER_SCAN_S = 1.0  # checkpoints/ and league/ are listed at most this often

    def __init__(self, run_dir: Path, source: StatusSource | None = None):
        self.run_dir = Path(run_dir)
        self.source = source
        self.series = RunSeries()
        self.files = RunFiles(self.run_dir, self.series, live_sampler=source is not None)
        self.started_wall = time.time()
        self._rates = collections.deque(maxlen=61)  # (t, agent_steps, rounds), one a sample
        self._steps_per_s: float | None = None
        self._rounds_per_s: float | None = None
        self._scan_at = -1e9
        self._folder: dict = dict(checkpoint=None, snapshots=0, latest_snapshot=None)
        self._replays: tuple[float, str | None] = (-1.0, None)  # replays/'s mtime, its newest file
        self._recipe_games: list[dict] | None = None

    # ---- feeding --------------------------------------------------------------------

    def refresh(self) -> None:
        """Read what the logs gained; list checkpoints/ and league/ (at most 1/s)."""
        self.files.poll()
        now = time.monotonic()
        if now - self._scan_at >= self.FOLDER_SCAN_S:
            self._scan_at = now
            self._folder = self._scan_folder()

    def sample(self, now: float | None = None) -> None:
        """Live: one sample of the source's counters (the server calls it every second)."""
        if self.source is None:
            return
        now = time.time() if now is None else now
        st = self.source.stats()
        self._rates.append((now, int(st.get("agent_steps", 0)), int(st.get("rounds", 0))))
        if len(self._rates) >= 2:
            (t1, s1, r1), (t2, s2, r2) = self._rates[-2], self._rates[-1]
            dt = max(t2 - t1, 1e-6)
            self._steps_per_s, self._rounds_per_s = (s2 - s1) / dt, (r2 - r1) / dt
            self.series.add_sample(now, steps_per_s=self._steps_per_s,
                                   restarts=sum(g.get("restarts") or 0 for g in self.source.games()))
        elif self.series.t0 is None:
            self.series.t0 = now

    def _scan_folder(self) -> dict:
        out = dict(checkpoint=None, snapshots=0, latest_snapshot=None)
        ck = self.run_dir / "checkpoints"
        try:
            name = (ck / "latest").read_text().strip()
            st = os.stat(ck / name)
            out["checkpoint"] = dict(name=name, path=str(ck / name), saved_at=_iso(st.st_mtime),
                                     age_s=_f(time.time() - st.st_mtime, 1), bytes=st.st_size)
        except (OSError, ValueError):
            pass
        try:
            snaps = sorted(p for p in os.listdir(self.run_dir / "league") if p.startswith("snap-") and p.endswith(".pt"))
        except OSError:
            snaps = []
        out["snapshots"] = len(snaps)
        if snaps:
            try:
                out["latest_snapshot"] = int(snaps[-1][5:-3])
            except ValueError:
                pass
        self._scan_replays()
        return out

    def _scan_replays(self) -> None:
        """The newest finished replay in replays/ (where the eval games record), listed
        again only when the folder changed: a long run's thousands of replays are not
        listed every second."""
        d = self.run_dir / REPLAY_DIR
        try:
            mtime = os.stat(d).st_mtime
        except OSError:
            return
        if mtime == self._replays[0]:
            return
        best, best_t = None, -1.0
        with os.scandir(d) as it:
            for e in it:
                if e.name.endswith(REPLAY_SUFFIXES) and e.is_file():  # not the .part being written
                    t = e.stat().st_mtime
                    if t > best_t:
                        best, best_t = e.path, t
        self._replays = (mtime, best)

    # ---- reading --------------------------------------------------------------------

    def live(self) -> bool:
        """A supervisor holds the run: ours (a source) until its shutdown event, or one
        whose pid run.lock names."""
        if self.source is not None:
            return self.files.shutdown is None
        try:
            pid = int(json.loads((self.run_dir / "run.lock").read_text() or "{}").get("pid", 0))
        except (OSError, ValueError, TypeError):
            return False
        return pid > 0 and os.path.exists(f"/proc/{pid}")

    def games(self) -> list[dict]:
        if self.source is not None:
            return [{k: g.get(k) for k in GAME_KEYS} for g in self.source.games()]
        groups = self._groups()
        out = []
        for slot in sorted(self.files.games):
            g = self.files.games[slot]
            grp = groups[slot] if slot < len(groups) else {}
            out.append(dict(slot=slot, pid=g.pid, runtime=g.runtime or grp.get("runtime"), role=grp.get("role"),
                            lanes=grp.get("lanes"),
                            sides=grp.get("sides"), state=g.state, restarts=g.restarts, causes=dict(g.causes),
                            steps=None, last_step_age_s=None))
        return out

    def _groups(self) -> list[dict]:
        """recipe.json's game groups, one entry per slot (file mode only)."""
        if self._recipe_games is None:
            try:
                r = json.loads((self.run_dir / "recipe.json").read_text())
                self._recipe_games = [dict(runtime=g.get("runtime", "native"), role=g.get("role"),
                                           lanes=g.get("lanes", 1), sides=g.get("sides", 2)) for g in r.get("games", [])
                                      for _ in range(int(g.get("count", 1)))]
            except (OSError, ValueError, AttributeError):
                return []
        return self._recipe_games

    def status(self) -> dict:
        """The /status body (docs/status.md)."""
        f, s = self.files, self.series
        st = self.source.stats() if self.source is not None else {}
        run = f.run
        started = run.get("started") or (self.started_wall if self.source else s.t0)
        ended = f.shutdown["t"] if f.shutdown else None
        live = self.live()
        now = time.time()
        uptime = (now if live or not ended else ended) - started if started else None
        games = self.games()
        states = collections.Counter(g["state"] for g in games)
        if st:
            # From the slots' own causes: the same figures /games shows, in one read.
            restarts = collections.Counter()
            for g in games:
                restarts.update(g.get("causes") or {})
            restarts = dict(restarts)
            agent_steps, rounds, bad_rows = st.get("agent_steps", 0), st.get("rounds", 0), st.get("bad_rows", 0)
            steps_per_s, rounds_per_s = self._steps_per_s, self._rounds_per_s
        else:
            restarts, bad_rows = dict(f.restarts), f.bad_rows
            sd = f.shutdown or {}
            agent_steps = max(int(sd.get("agent_steps") or 0), f.rows)
            rounds = max(int(sd.get("rounds") or 0), f.rounds)
            lr = s.last_round or {}
            if live and lr:
                steps_per_s, rounds_per_s = _f(lr.get("rows")), _f(lr.get("rounds"))
            else:  # a finished run: its average
                secs = sd.get("seconds") or uptime
                steps_per_s = agent_steps / secs if secs else None
                rounds_per_s = rounds / secs if secs else None
        per_60 = None
        if len(self._rates) >= 2:
            (t1, s1, _), (t2, s2, _) = self._rates[0], self._rates[-1]
            per_60 = (s2 - s1) / max(t2 - t1, 1e-6)
        lr = s.last_round or {}
        lat, comp = _f(lr.get("latency_ms_mean")), _f(lr.get("compute_ms_mean"))
        lu = s.last_update or {}
        ep = s.episodes
        return dict(
            schema=SCHEMA, time=_iso(now),
            run=dict(name=run.get("run") or self.run_dir.name, dir=str(self.run_dir), recipe=run.get("recipe"),
                     pid=run.get("pid"), started=_iso(started), uptime_s=_f(uptime, 1), live=live,
                     ended=_iso(ended) if ended else None, error=(f.shutdown or {}).get("error")),
            steps=dict(agent_steps=int(agent_steps), per_s=_f(steps_per_s, 1), per_s_60s=_f(per_60, 1)),
            games=dict(total=len(games), alive=states["running"] + states["starting"], running=states["running"],
                       starting=states["starting"], restarting=states["restarting"], failed=states["failed"],
                       stopped=states["stopped"], restarts=sum(restarts.values()), restarts_by_cause=restarts,
                       bad_rows=int(bad_rows)),
            inference=dict(rounds=int(rounds), rounds_per_s=_f(rounds_per_s, 1),
                           rows_per_round=_f(agent_steps / rounds if rounds else None, 2),
                           latency_ms_mean=lat, latency_ms_p95=_f(lr.get("latency_ms_p95")),
                           latency_ms_max=_f(lr.get("latency_ms_max")), compute_ms_mean=comp,
                           compute_share=_f(rounds_per_s * comp / 1000.0 if rounds_per_s and comp else None, 4),
                           buckets=lr.get("buckets") or {}, learner_phase=lr.get("learner_phase")),
            learner=dict(updates=s.updates, update=lu.get("update"), update_s=_f(lu.get("update_s")),
                         wait_s=_f(lu.get("wait_s")), staleness=_f(lu.get("staleness")),
                         policy_loss=_f(lu.get("policy_loss"), 5), value_loss=_f(lu.get("value_loss"), 5),
                         entropy=_f(lu.get("entropy"), 5), approx_kl=_f(lu.get("approx_kl"), 6),
                         lr=_f(lu.get("lr"), 8), steps=lu.get("steps")),
            league=dict(snapshots=self._folder["snapshots"], latest_snapshot=self._folder["latest_snapshot"],
                        opponents=dict(s.opponents)),
            evaluation=s.evaluation(),
            episodes=dict(total=len(ep), eval=sum(t.games for t in s.levels.values()),
                          train=s.train.as_dict(), last_eval_replay=self.latest_replay()),
            checkpoint=self._folder["checkpoint"],
        )

    def latest_replay(self) -> str | None:
        """The replay to show: the source's `latest_replay_path()` when it has one, else
        the latest evaluation episode's `replay` (episodes.jsonl), else the newest
        finished file in replays/."""
        get = getattr(self.source, "latest_replay_path", None)
        p = (get() if get else None) or self.series.last_eval_replay or self._replays[1]
        if not p:
            return None
        p = Path(p)
        return str(p if p.is_absolute() else self.run_dir / p)


# ---- Prometheus text ------------------------------------------------------------------

def metrics_text(st: dict) -> str:
    """/status's figures in the Prometheus text format (docs/status.md lists them)."""
    out: list[str] = []

    def m(name: str, kind: str, help_: str, samples: list[tuple[dict, object]]) -> None:
        out.append(f"# HELP w3async_{name} {help_}")
        out.append(f"# TYPE w3async_{name} {kind}")
        for labels, v in samples:
            if v is None:
                continue
            lab = ",".join(f'{k}="{_esc(str(x))}"' for k, x in labels.items())
            out.append(f"w3async_{name}{{{lab}}} {float(v):g}" if lab else f"w3async_{name} {float(v):g}")

    g, i, le, steps = st["games"], st["inference"], st["learner"], st["steps"]
    m("up", "gauge", "1 while a supervisor runs the run", [({}, int(st["run"]["live"]))])
    m("uptime_seconds", "gauge", "seconds since the run started", [({}, st["run"]["uptime_s"])])
    m("agent_steps_total", "counter", "rows answered", [({}, steps["agent_steps"])])
    m("agent_steps_per_second", "gauge", "agent steps per second over the last sample", [({}, steps["per_s"])])
    m("games", "gauge", "game slots by state",
      [({"state": k}, g[k]) for k in ("running", "starting", "restarting", "failed", "stopped")])
    m("game_restarts_total", "counter", "game restarts by cause",
      [({"cause": c}, n) for c, n in sorted(g["restarts_by_cause"].items())])
    m("bad_rows_total", "counter", "rows that failed the checks", [({}, g["bad_rows"])])
    m("inference_rounds_total", "counter", "inference rounds", [({}, i["rounds"])])
    m("inference_rows_per_round", "gauge", "rows per round (run average)", [({}, i["rows_per_round"])])
    m("inference_latency_ms", "gauge", "round latency over the last second",
      [({"stat": "mean"}, i["latency_ms_mean"]), ({"stat": "p95"}, i["latency_ms_p95"]),
       ({"stat": "max"}, i["latency_ms_max"])])
    m("inference_compute_ms", "gauge", "round compute time (mean, last second)", [({}, i["compute_ms_mean"])])
    m("inference_compute_share", "gauge", "share of wall time spent computing rounds", [({}, i["compute_share"])])
    m("learner_updates_total", "counter", "PPO updates", [({}, le["updates"])])
    m("learner_update_seconds", "gauge", "the last update's time", [({}, le["update_s"])])
    m("learner_wait_seconds", "gauge", "the last update's wait for data", [({}, le["wait_s"])])
    m("learner_staleness", "gauge", "policy versions between acting and learning", [({}, le["staleness"])])
    m("learner_loss", "gauge", "the last update's losses",
      [({"kind": "policy"}, le["policy_loss"]), ({"kind": "value"}, le["value_loss"])])
    m("learner_entropy", "gauge", "the last update's policy entropy", [({}, le["entropy"])])
    m("learner_approx_kl", "gauge", "the last update's approximate KL", [({}, le["approx_kl"])])
    m("league_snapshots", "gauge", "league snapshots on disk", [({}, st["league"]["snapshots"])])
    ev = st["evaluation"]
    m("eval_games_total", "counter", "evaluation games by built-in AI level",
      [({"level": k}, v["games"]) for k, v in ev.items()])
    m("eval_wins_total", "counter", "evaluation wins by level", [({"level": k}, v["wins"]) for k, v in ev.items()])
    m("eval_win_rate", "gauge", "evaluation score (wins + draws/2) / games by level",
      [({"level": k, "window": w}, v[f]) for k, v in ev.items()
       for w, f in (("all", "win_rate"), ("recent", "recent_win_rate"))])
    m("episodes_total", "counter", "finished episodes", [({}, st["episodes"]["total"])])
    ck = st["checkpoint"]
    m("checkpoint_age_seconds", "gauge", "seconds since the latest checkpoint", [({}, ck["age_s"] if ck else None)])
    return "\n".join(out) + "\n"


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# ---- the server -------------------------------------------------------------------------

class StatusServer:
    """aiohttp on the supervisor's loop. Lifecycle: start() binds and serves (raises
    StatusError when the port is taken), stop() cancels the sampler and closes."""

    def __init__(self, source: StatusSource | None = None, run_dir: Path | None = None, host: str = "127.0.0.1",
                 port: int = 0, sample_s: float = 1.0):
        if source is None and run_dir is None:
            raise ValueError("StatusServer needs a source or a run_dir")
        self.view = RunView(Path(run_dir) if run_dir else source.run_dir, source)
        self.host, self.port = host, port
        self.sample_s = sample_s
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task | None = None
        self._replay_cache: tuple | None = None
        self._url_file: Path | None = None
        self.sample_error: str | None = None
        self.app = self._make_app()

    @property
    def url(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{h}:{self.port}/"

    def _make_app(self) -> web.Application:
        app = web.Application(client_max_size=1024, middlewares=[_headers])
        app.router.add_get("/", self._page)
        app.router.add_get("/status", self._status)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/games", self._games)
        app.router.add_get("/series", self._series)
        app.router.add_get("/replay/latest", self._replay)
        app.router.add_get("/static/{name}", self._static)
        return app

    async def start(self) -> int:
        """Bind host:port (0: a free port), serve, start sampling; returns the port."""
        if self._runner is not None:
            raise StatusError("StatusServer.start() called twice: call stop() first")
        sock = _bind(self.host, self.port)
        self.port = sock.getsockname()[1]
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, logger=_HTTP_LOG)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        self.view.sample()
        self._task = asyncio.create_task(self._sampler())
        return self.port

    async def stop(self) -> None:
        """Stop sampling and serving (open requests get ~1 s). Safe to call twice."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._url_file is not None:
            try:
                self._url_file.unlink()
            except FileNotFoundError:
                pass
            self._url_file = None
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.sample_s)
            try:
                self.view.sample()
                self.view.refresh()
                if self.view.source is not None and self._url_file is None:
                    self._write_url_file()
            except Exception as e:  # noqa: BLE001 (the server outlives a bad sample)
                self.sample_error = repr(e)

    def _write_url_file(self) -> None:
        """runs/<run>/status.url: where `w3async status` finds the live counters (once
        the supervisor has made the folder). Removed by stop()."""
        if not self.view.run_dir.is_dir():
            return
        path = self.view.run_dir / URL_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.url + "\n")
        os.replace(tmp, path)
        self._url_file = path

    def _refresh(self) -> None:
        """Every request reads what the logs gained: a stat per file when nothing did."""
        self.view.refresh()

    # ---- routes -------------------------------------------------------------------

    async def _page(self, request: web.Request) -> web.Response:
        return web.FileResponse(STATIC / "dashboard.html", headers={"Content-Type": "text/html; charset=utf-8"})

    async def _static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound(text=f"no static file {name!r}")
        return web.FileResponse(STATIC / name, headers={"Content-Type": STATIC_FILES[name]})

    async def _status(self, request: web.Request) -> web.Response:
        self._refresh()
        return _json(self.view.status())

    async def _metrics(self, request: web.Request) -> web.Response:
        self._refresh()
        return web.Response(text=metrics_text(self.view.status()), content_type="text/plain",
                            headers={"X-Prometheus-Format": "0.0.4"})

    async def _games(self, request: web.Request) -> web.Response:
        self._refresh()
        return _json(dict(schema=SCHEMA, games=self.view.games()))

    async def _series(self, request: web.Request) -> web.Response:
        self._refresh()
        return _json(dict(schema=SCHEMA, levels=list(AI_LEVELS), plots=self.view.series.plots()))

    async def _replay(self, request: web.Request) -> web.Response:
        self._refresh()
        p = self.view.latest_replay()
        if not p:
            return _json(dict(error="no evaluation replay yet"), status=404)
        try:
            mtime = os.stat(p).st_mtime
            if self._replay_cache and self._replay_cache[:2] == (p, mtime):
                body = self._replay_cache[2]
            else:
                # A long game is ~10^4 units to convert: off the loop, which runs the rounds.
                body = await asyncio.get_running_loop().run_in_executor(None, _replay_json, p)
                self._replay_cache = (p, mtime, body)
        except (OSError, ReplayError) as e:
            return _json(dict(error=str(e)), status=404)
        return web.Response(text=body, content_type="application/json")


def _replay_json(path: str) -> str:
    view = replay_view(Path(path))
    view.setdefault("meta", {})["path"] = path
    return json.dumps(view, separators=(",", ":"))


@web.middleware
async def _headers(request: web.Request, handler):
    resp = await handler(request)
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def _json(body: dict, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body, allow_nan=False), status=status, content_type="application/json")


def _bind(host: str, port: int) -> socket.socket:
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
