"""The status server: every route and its schema (docs/status.md), bad requests, a port
in use, series whose refresh costs the same at 100 and 100,000 episodes, the console
progress line and `w3async status` from a run's files, and a real null-game run; its
limits: the Host header, symlinks out of the run folder, half-open connections, the
connection cap, the request rate, and a run that keeps stepping under 100 clients."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from w3async.observe import status_cli
from w3async.observe.progress import progress_line
from w3async.recipes import recipe_from_dict
from w3async.observe.bins import Bins
from w3async.observe.run_files import RunFiles, Tail
from w3async.observe.series import RunSeries
from w3async.observe.logs import JsonLog
from w3async.observe.http_limits import Limits, connection_cap
from w3async.observe.replay_view import ReplayError, replay_view
from w3async.observe.run_view import GAME_KEYS, RunView
from w3async.observe.status import StatusError, StatusServer
from w3async.observe.status_metrics import metrics_text
from w3async.compose import supervisor

from tests.conftest import BUILD, REPO

T0 = 1_790_000_000.0  # a fixed start: the logs' times are T0 + offsets

STATUS_KEYS = {
    "schema", "time", "run", "steps", "games", "inference", "learner", "league", "evaluation", "episodes", "checkpoint",
    "best", "hosts", "videos", "accounting"}
SUB_KEYS = {
    "run": {"name", "dir", "recipe", "pid", "started", "uptime_s", "resumed_steps", "live", "ended", "error"},
    "steps": {"agent_steps", "per_s", "per_s_60s"},
    "games": {"total", "alive", "running", "starting", "restarting", "failed", "stopped", "restarts",
              "restarts_by_cause", "bad_rows"},
    "inference": {"rounds", "rounds_per_s", "rows_per_round", "latency_ms_mean", "latency_ms_p95", "latency_ms_max",
                  "compute_ms_mean",
                  "compute_share", "buckets", "learner_phase"},
    "learner": {"updates", "update", "update_s", "wait_s", "staleness", "policy_loss", "value_loss", "entropy",
                "approx_kl", "lr", "steps"},
    "league": {"snapshots", "latest_snapshot", "opponents"},
    "episodes": {"total", "eval", "train", "last_eval_replay"},
}
TALLY_KEYS = {"games", "wins", "decisive_wins", "time_limit_wins", "losses", "time_limit_losses", "draws", "win_rate",
              "decisive_rate", "recent_games", "recent_win_rate", "recent_decisive_rate", "mean_return",
              "recent_mean_return", "episodes"}


# ---- a run folder written the way docs/logs.md says --------------------------------

def ts(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def line(t: float, event: str, level: str = "info", **kw) -> str:
    return json.dumps(dict(kw, event=event, level=level, ts=ts(t))) + "\n"


def write_logs(run: Path, episodes: int = 40, seconds: int = 30, updates: int = 5, finished: bool = True,
               slots: int = 2) -> None:
    """A run folder's four logs (the docs/logs.md schemas) over `seconds` from T0."""
    run.mkdir(parents=True, exist_ok=True)
    ev = [line(T0, "run_start", run=run.name, recipe="fake", pid=1, shm="/w3a-x", rows=8, games=slots,
               gather="c", policy="check")]
    for s in range(slots):
        ev.append(line(T0 + 0.1, "game_start", slot=s, pid=100 + s, runtime="native", binary="x", rows=[4 * s, 4 * s + 4],
                       start=0))
    ev.append(line(T0 + 5, "game_exit", level="warning", slot=0, pid=100, returncode=-11, cause="crash", posted=True,
                   stderr=""))
    ev.append(line(T0 + 5, "game_restart", slot=0, cause="crash", delay_s=0.5, restarts=1))
    ev.append(line(T0 + 5.5, "game_start", slot=0, pid=200, runtime="native", binary="x", rows=[0, 4], start=1))
    if finished:
        ev.append(line(T0 + seconds, "shutdown", error=None, agent_steps=1000 * seconds, rounds=100 * seconds,
                       seconds=float(seconds), cpu_s=1.0, leftovers={}))
    (run / "events.jsonl").write_text("".join(ev))
    (run / "inference.jsonl").write_text("".join(
        line(T0 + i, "rounds", rounds=100, rows=1000, rows_per_round=10.0, latency_ms_mean=2.0 + i % 3,
             latency_ms_p95=4.0, compute_ms_mean=1.0, buckets={"32": 90, "48": 10},
             learner_phase="update" if i % 2 else "idle") for i in range(1, seconds)))
    (run / "learner.jsonl").write_text("".join(
        line(T0 + 2 + i * 5, "update", update=i + 1, update_s=1.5, wait_s=0.25, staleness=1.0, policy_loss=-0.01,
             value_loss=0.5, entropy=2.0, approx_kl=0.004, lr=3e-4, steps=4096) for i in range(updates)))
    ep = []
    levels = ["ai:easy", "ai:normal", "ai:hard"]
    for i in range(episodes):
        ev_ = i % 4 == 0
        opp = levels[(i // 4) % 3] if ev_ else ("self" if i % 3 else "league:2")
        ep.append(line(T0 + seconds * i / max(episodes, 1), "episode", slot=i % slots, lane=0, side=0, opponent=opp,
                       eval=ev_, result=("win", "loss", "draw")[i % 3], steps=300, **{"return": 1.0},
                       policy_version=i // 10))
    (run / "episodes.jsonl").write_text("".join(ep))
    (run / "recipe.json").write_text(json.dumps({"name": "fake", "games": [{"count": slots, "lanes": 2, "sides": 2,
                                                                             "runtime": "native"}]}))
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "checkpoints" / "ckpt-00000004.pt").write_bytes(b"x" * 10)
    (run / "checkpoints" / "latest").write_text("ckpt-00000004.pt\n")
    (run / "league").mkdir(exist_ok=True)
    for v in (2, 4):
        (run / "league" / f"snap-{v:08d}.pt").write_bytes(b"x")


class FakeSource:
    """A StatusSource with counters the test sets."""

    def __init__(self, run_dir: Path, slots: int = 2, replay: str | None = None):
        self.run_dir = run_dir
        self.replay = replay  # what latest_replay_path() names (None: the newest file in replays/)
        self.steps, self.rounds = 0, 0
        self.restarts = {"crash": 1}
        self.slots = slots

    def stats(self) -> dict:
        return dict(agent_steps=self.steps, rounds=self.rounds, rows_per_round=self.steps / max(self.rounds, 1),
                    seconds=10.0, cpu_s=1.0, bad_rows=0, restarts=dict(self.restarts),
                    games={i: dict(pid=100 + i, state="running", restarts=0, causes={}) for i in range(self.slots)})

    def latest_replay_path(self) -> str | None:
        return self.replay

    games_: list[dict] | None = None

    def games(self) -> list[dict]:
        if self.games_ is not None:
            return self.games_
        return [dict(slot=i, pid=100 + i, runtime="native", lanes=2, sides=2, state="running", restarts=i,
                     causes={"crash": i} if i else {}, steps=1000 * i, last_step_age_s=0.01) for i in range(self.slots)]


def check_status_schema(st: dict) -> None:
    assert set(st) == STATUS_KEYS
    assert st["schema"] == 1
    for k, keys in SUB_KEYS.items():
        assert set(st[k]) == keys, k
    for lvl, tally in st["evaluation"].items():
        assert lvl in ("ai:easy", "ai:normal", "ai:hard") and set(tally) == TALLY_KEYS
    assert set(st["episodes"]["train"]) == TALLY_KEYS
    if st["checkpoint"] is not None:
        assert set(st["checkpoint"]) == {"name", "path", "saved_at", "age_s", "bytes"}
    if st["best"] is not None:
        assert {"path", "updates", "score", "games", "lo", "hi", "levels", "saved_at"} <= set(st["best"])
    json.dumps(st, allow_nan=False)  # no NaN reaches the page


class Serving:
    """A started StatusServer (its own thread) and a client session on its URL."""

    def __init__(self, server: StatusServer):
        self.server = server

    async def __aenter__(self) -> aiohttp.ClientSession:
        await self.server.start()
        self.session = aiohttp.ClientSession(base_url=self.server.url)
        return self.session

    async def __aexit__(self, *exc) -> None:
        await self.session.close()
        await self.server.stop()


@pytest.fixture
async def served(tmp_path):
    """(client, server, source) over a fake live run with logs; the sampler is left
    asleep (sample_s=3600): the tests hand it snapshots with refresh_now()."""
    run = tmp_path / "run"
    write_logs(run, finished=False)
    src = FakeSource(run)
    server = StatusServer(src, sample_s=3600)
    async with Serving(server) as client:
        yield client, server, src


# ---- routes ---------------------------------------------------------------------------

async def test_status_schema_and_values(served):
    client, server, src = served
    t = time.time()  # start() took the first sample (0 steps) just before
    await server.refresh_now(now=t + 1000.0)
    src.steps, src.rounds = 5000, 500
    await server.refresh_now(now=t + 1002.0)
    r = await client.get("/status")
    assert r.status == 200 and r.content_type == "application/json"
    st = await r.json()
    check_status_schema(st)
    assert st["run"]["live"] is True and st["run"]["recipe"] == "fake" and st["run"]["name"] == "run"
    assert st["steps"]["agent_steps"] == 5000 and st["steps"]["per_s"] == 2500.0  # the last delta, not a mean
    assert 4.9 < st["steps"]["per_s_60s"] <= 5.0  # over the samples kept: 5000 in ~1002 s
    assert st["inference"]["rounds_per_s"] == 250.0 and st["inference"]["rows_per_round"] == 10.0
    assert st["inference"]["latency_ms_p95"] == 4.0 and st["inference"]["buckets"] == {"32": 90, "48": 10}
    assert st["games"]["total"] == 2 and st["games"]["alive"] == 2 and st["games"]["restarts_by_cause"] == {"crash": 1}
    src.games_ = [dict(g, causes={"crash": 2, "hang": 1}) for g in src.games()]  # totals sum over slots
    st = await (await client.get("/status")).json()
    assert st["games"]["restarts_by_cause"] == {"crash": 1}  # served from the last snapshot until the next
    await server.refresh_now(now=t + 1003.0)
    st = await (await client.get("/status")).json()
    assert st["games"]["restarts_by_cause"] == {"crash": 4, "hang": 2} and st["games"]["restarts"] == 6
    assert st["learner"]["updates"] == 5 and st["learner"]["update"] == 5 and st["learner"]["update_s"] == 1.5
    assert st["league"]["snapshots"] == 2 and st["league"]["latest_snapshot"] == 4
    assert st["league"]["opponents"]["self"] > 0 and st["league"]["opponents"]["league:2"] > 0
    # 40 episodes, every 4th an evaluation, levels in turn: easy gets episodes 0, 12, 24, 36
    easy = st["evaluation"]["ai:easy"]
    assert easy["games"] == 4 and easy["wins"] + easy["losses"] + easy["draws"] == 4
    assert sum(e["games"] for e in st["evaluation"].values()) == st["episodes"]["eval"] == 10
    assert st["episodes"]["total"] == 40
    assert st["checkpoint"]["name"] == "ckpt-00000004.pt"


async def test_status_follows_new_lines(served):
    client, server, _ = served
    before = (await (await client.get("/status")).json())["episodes"]["total"]
    with open(server.view.run_dir / "episodes.jsonl", "a") as f:
        f.write(line(T0 + 40, "episode", slot=0, lane=0, side=0, opponent="ai:hard", eval=True, result="win",
                     steps=10, policy_version=9))
        f.write('{"ts": "2026-')  # a line still being written: not read yet
    await server.refresh_now()
    st = await (await client.get("/status")).json()
    assert st["episodes"]["total"] == before + 1
    await server.stop()
    assert server.run_view.files.bad_lines == 0  # the view is ours again once the thread has ended


async def test_games_route(served):
    client, *_ = served
    r = await client.get("/games")
    body = await r.json()
    assert r.status == 200 and body["schema"] == 1 and len(body["games"]) == 2
    for g in body["games"]:
        assert set(g) == set(GAME_KEYS)
    assert body["games"][1]["causes"] == {"crash": 1}


def prom_families(text: str) -> dict:
    """{family name: (type, {(sample name, sorted labels): value})}, read by prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families
    fams = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name not in fams, fam.name
        fams[fam.name] = (fam.type, {(s.name, tuple(sorted(s.labels.items()))): s.value for s in fam.samples})
    return fams


async def test_metrics_prometheus_text(served):
    client, server, src = served
    src.steps = 1234
    await server.refresh_now()
    r = await client.get("/metrics")
    text = await r.text()
    assert r.status == 200 and r.content_type == "text/plain" and "version=0.0.4" in r.headers["Content-Type"]
    fams = prom_families(text)
    assert {t for t, _ in fams.values()} <= {"gauge", "counter"}
    samples = {k: v for _, ss in fams.values() for k, v in ss.items()}
    for name, labels, value in (("w3async_agent_steps_total", (), 1234), ("w3async_games", (("state", "running"),), 2),
                                ("w3async_game_restarts_total", (("cause", "crash"),), 1),
                                ("w3async_eval_games_total", (("level", "ai:easy"),), 4),
                                ("w3async_inference_latency_ms", (("stat", "p95"),), 4),
                                ("w3async_learner_updates_total", (), 5), ("w3async_league_snapshots", (), 2),
                                ("w3async_up", (), 1)):
        assert samples[(name, labels)] == value, name
    assert fams["w3async_agent_steps"][0] == "counter" and fams["w3async_uptime_seconds"][0] == "gauge"
    # the same figures as /status
    st = await (await client.get("/status")).json()
    assert samples[("w3async_inference_rounds_total", ())] == st["inference"]["rounds"]
    for level, tally in st["evaluation"].items():
        assert samples[("w3async_eval_win_rate", (("level", level), ("window", "all")))] == tally["win_rate"]
    # docs/status.md's /metrics table names every family (a counter's with its `_total`) and no other
    doc = (REPO / "docs" / "status.md").read_text().split("## `GET /metrics`")[1].split("\n## ")[0]
    documented = set(re.findall(r"`(w3async_[a-z0-9_]+)`", doc))
    assert {name + ("_total" if t == "counter" else "") for name, (t, _) in fams.items()} == documented
    assert {name for name, _ in samples} <= documented


def test_metrics_text_escapes_labels_and_leaves_out_nulls():
    """A label value with a quote, a backslash or a newline reads back as it was; a null figure has no sample."""
    run = {"live": True, "uptime_s": None}
    odd = 'ai:"hard"\\x\nnext'
    st = dict(run=run, steps=dict(agent_steps=7, per_s=None),
              games=dict(running=1, starting=0, restarting=0, failed=0, stopped=0, restarts_by_cause={}, bad_rows=0),
              inference={k: None for k in ("rounds", "rows_per_round", "latency_ms_mean", "latency_ms_p95",
                                           "latency_ms_max", "compute_ms_mean", "compute_share")},
              learner={k: None for k in ("updates", "update_s", "wait_s", "staleness", "policy_loss", "value_loss",
                                         "entropy", "approx_kl")},
              league=dict(snapshots=0), episodes=dict(total=3), checkpoint=None,
              evaluation={odd: dict(games=2, wins=1, win_rate=0.5, recent_win_rate=None)})
    fams = prom_families(metrics_text(st))
    assert fams["w3async_eval_games"][1] == {("w3async_eval_games_total", (("level", odd),)): 2.0}
    assert fams["w3async_eval_win_rate"][1] == {("w3async_eval_win_rate", (("level", odd), ("window", "all"))): 0.5}
    assert fams["w3async_uptime_seconds"][1] == {} and fams["w3async_checkpoint_age_seconds"][1] == {}
    assert fams["w3async_agent_steps"][1] == {("w3async_agent_steps_total", ()): 7.0}
    assert fams["w3async_up"][1] == {("w3async_up", ()): 1.0}


async def test_page_static_and_series(served):
    client, *_ = served
    r = await client.get("/")
    html = await r.text()
    assert r.status == 200 and r.content_type == "text/html" and r.charset == "utf-8"
    assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    for src in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert src.startswith("/") or src.startswith("data:"), src  # nothing from another host
        if src.startswith("/static/"):
            s = await client.get(src)
            assert s.status == 200, src
            assert "http://" not in await s.text() and "https://" not in await s.text()
    r = await client.get("/series")
    body = await r.json()
    assert set(body["plots"]) == {"steps_per_s", "win_rate", "latency_ms", "update_s", "restarts", "discarded", "cores",
                                  "memory_mb"}
    for name, lines in body["plots"].items():
        for ln in lines:
            assert len(ln["t"]) == len(ln["y"]) and set(ln) == {"label", "t", "y"}
    lat = body["plots"]["latency_ms"][0]
    assert len(lat["t"]) > 5 and min(lat["y"]) >= 2.0 and max(lat["y"]) <= 4.0
    assert len(body["plots"]["win_rate"][0]["t"]) > 0 and len(body["plots"]["update_s"][1]["t"]) > 0


async def test_bad_requests_get_4xx(served):
    client, *_ = served
    for method, path, want in [("GET", "/nope", 404), ("POST", "/status", 405), ("PUT", "/games", 405),
                               ("DELETE", "/", 405), ("GET", "/static/../status.py", 404),
                               ("GET", "/static/secret.py", 404), ("GET", "/static/%2e%2e%2fstatus.py", 404),
                               ("POST", "/replay/latest", 405)]:
        r = await client.request(method, path)
        assert r.status == want, (method, path, r.status)
    r = await client.post("/status", data=b"x" * 100_000)
    assert 400 <= r.status < 500
    assert (await client.get("/status")).status == 200


async def raw_request(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def test_huge_headers_and_garbage_keep_the_server_up(tmp_path):
    write_logs(tmp_path / "run")
    server = StatusServer(FakeSource(tmp_path / "run"))
    port = await server.start()
    try:
        resp = await raw_request(port, b"GET /status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        assert re.match(rb"HTTP/1.[01] 4\d\d", resp), resp[:80]
        resp = await raw_request(port, b"\x00\x01garbage\r\n\r\n")
        assert re.match(rb"HTTP/1.[01] 4\d\d", resp), resp[:80]
        resp = await raw_request(port, b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert re.match(rb"HTTP/1.[01] 4\d\d", resp), resp[:80]
        async with aiohttp.ClientSession() as s, s.get(f"{server.url}status") as r:
            assert r.status == 200 and (await r.json())["run"]["recipe"] == "fake"
    finally:
        await server.stop()
        await server.stop()  # twice is fine


async def test_port_in_use_is_a_clear_error_and_port_0_picks_one(tmp_path):
    write_logs(tmp_path / "run")
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        with pytest.raises(StatusError, match=f"port {port} on 127.0.0.1 is in use.*port 0"):
            await StatusServer(FakeSource(tmp_path / "run"), port=port).start()
        server = StatusServer(FakeSource(tmp_path / "run"), port=0)
        got = await server.start()
        assert got not in (0, port) and server.url == f"http://127.0.0.1:{got}/"
        await server.stop()
    finally:
        holder.close()
    with pytest.raises(StatusError, match="cannot resolve host"):
        await StatusServer(FakeSource(tmp_path / "run"), host="no.such.host.invalid").start()


async def test_a_video_is_served_whole_and_by_range(tmp_path):
    """/videos/NAME answers a Range request (a browser's seek) with that part, 206 and
    its Content-Range; a range past the end 416; a name that is no video 404."""
    from w3async.observe.video import VIDEO_DIR

    run = tmp_path / "run"
    write_logs(run, finished=False)
    (run / VIDEO_DIR).mkdir()
    data = bytes(range(256)) * 4
    (run / VIDEO_DIR / "eval-000000000100.mp4").write_bytes(data)
    url = "/videos/eval-000000000100.mp4"
    async with Serving(StatusServer(FakeSource(run))) as client:
        r = await client.get(url)
        assert r.status == 200 and await r.read() == data and r.headers["Accept-Ranges"] == "bytes"
        for rng, want in (("bytes=10-19", (10, 20)), ("bytes=1000-", (1000, 1024)), ("bytes=-24", (1000, 1024))):
            r = await client.get(url, headers={"Range": rng})
            assert r.status == 206 and await r.read() == data[want[0]:want[1]], rng
            assert r.headers["Content-Range"] == f"bytes {want[0]}-{want[1] - 1}/1024", rng
        r = await client.get(url, headers={"Range": "bytes=5000-"})
        assert r.status == 416 and r.headers["Content-Range"] == "bytes */1024"
        assert (await client.get("/videos/other.mp4")).status == 404


async def test_replay_route_json_duel_and_missing(tmp_path, duel_replay):
    run = tmp_path / "run"
    write_logs(run, finished=False)
    async with Serving(StatusServer(FakeSource(run))) as client:
        r = await client.get("/replay/latest")
        assert r.status == 404 and "no evaluation replay" in (await r.json())["error"]
    # a replay in the viewer's own JSON format, named by the source with a relative path
    (run / "replays").mkdir()
    view = dict(map=dict(w=4, h=3, cells=[0] * 12), side=0, steps=[dict(step=0, units=[
        dict(id=1, type=0, owner=0, x=1.5, y=1.5, hp=10, order=0, target=-1)])])
    (run / "replays" / "e1.json").write_text(json.dumps(view))
    async with Serving(StatusServer(FakeSource(run, replay="replays/e1.json"))) as client:
        body = await (await client.get("/replay/latest")).json()
        assert body["map"]["w"] == 4 and body["meta"]["path"] == str(run / "replays" / "e1.json")
    # the duel's own replay file (a copy in the run folder: the session's fixture stays whole)
    mine = run / "replays" / "eval.w3dr"
    shutil.copy(duel_replay, mine)
    server = StatusServer(FakeSource(run, replay=str(mine)), sample_s=3600)
    async with Serving(server) as client:
        body = await (await client.get("/replay/latest")).json()
        assert body["map"]["w"] == 32 and sum(body["map"]["cells"]) > 0 and len(body["steps"]) == 120
        u = body["steps"][-1]["units"][0]
        assert set(u) == {"id", "type", "owner", "x", "y", "hp", "order", "target", "dest"}
        assert body["meta"]["sides"] == ["ai:normal", "ai:hard"] and body["types"][0]["name"] == "base"
        # a broken file: a 404 with the reason once the server has seen it change, and the server goes on
        mine.write_bytes(b"W3DREPL1 broken")
        await server.refresh_now()
        r = await client.get("/replay/latest")
        assert r.status == 404 and "replay" in (await r.json())["error"]
        assert (await client.get("/status")).status == 200
    # a replay outside the run folder, named by its absolute path: not served
    outside = tmp_path / "elsewhere.w3dr"
    shutil.copy(duel_replay, outside)
    async with Serving(StatusServer(FakeSource(run, replay=str(outside)))) as client:
        r = await client.get("/replay/latest")
        assert r.status == 404 and "outside the run folder" in (await r.json())["error"]


async def test_replay_falls_back_to_the_newest_file_in_replays(tmp_path, duel_replay):
    """While the source names no replay, the newest finished file in replays/ is shown."""
    run = tmp_path / "run"
    write_logs(run, finished=False)
    (run / "replays").mkdir()
    (run / "replays" / "old.w3dr").write_bytes(b"not this one")
    os.utime(run / "replays" / "old.w3dr", (T0, T0))
    shutil.copy(duel_replay, run / "replays" / "duel-l1-e2-00ff.w3dr")
    (run / "replays" / "duel-l1-e3-0100.w3dr.part").write_bytes(b"being written")
    async with Serving(StatusServer(FakeSource(run))) as client:
        st = await (await client.get("/status")).json()
        assert st["episodes"]["last_eval_replay"] == str(run / "replays" / "duel-l1-e2-00ff.w3dr")
        body = await (await client.get("/replay/latest")).json()
        assert len(body["steps"]) == 120


async def test_symlinks_out_of_the_run_folder_are_not_followed(tmp_path, duel_replay):
    """A link in replays/ to a file outside the run folder is neither picked as the
    newest replay nor served when the source names it; a link that stays inside is."""
    run = tmp_path / "run"
    write_logs(run, finished=False)
    (run / "replays").mkdir()
    secret = tmp_path / "secret.json"  # outside the run folder, in the viewer's format
    secret.write_text(json.dumps(dict(map=dict(w=1, h=1, cells=[0]), side=0, steps=[], secret="s3cr3t")))
    (run / "replays" / "newest.json").symlink_to(secret)
    async with Serving(StatusServer(FakeSource(run))) as client:
        st = await (await client.get("/status")).json()
        assert st["episodes"]["last_eval_replay"] is None  # the link is not a replay
        r = await client.get("/replay/latest")
        assert r.status == 404 and "s3cr3t" not in await r.text()
    async with Serving(StatusServer(FakeSource(run, replay="replays/newest.json"))) as client:  # named: still not
        r = await client.get("/replay/latest")
        text = await r.text()
        assert r.status == 404 and "outside the run folder" in text and "s3cr3t" not in text
    shutil.copy(duel_replay, run / "replays" / "real.w3dr")  # a link that stays in the run folder
    (run / "replays" / "inside.w3dr").symlink_to(run / "replays" / "real.w3dr")
    async with Serving(StatusServer(FakeSource(run, replay="replays/inside.w3dr"))) as client:
        r = await client.get("/replay/latest")
        assert r.status == 200 and len((await r.json())["steps"]) == 120


def test_truncated_episodes_count_but_not_in_win_rates():
    s = RunSeries()
    s.add_episode(T0, "ai:easy", True, "win")
    s.add_episode(T0 + 1, "ai:easy", True, "truncated")
    s.add_episode(T0 + 2, "self", False, "truncated")
    assert len(s.episodes) == 3 and s.evaluation()["ai:easy"]["games"] == 1 and s.train.games == 0


def test_mean_returns_count_truncated_episodes_too():
    """A game scored by points (Snake: every game ends in a loss, or is cut by a hunger
    limit) is read by its returns: every ended episode's, with a result or without."""
    s = RunSeries()
    for k, (result, ret) in enumerate([("loss", 2.0), ("truncated", 7.0), ("loss", -1.0)]):
        s.add_episode(T0 + k, "ai:easy", True, result, ret=ret)
    s.add_episode(T0 + 3, "self", False, "truncated", ret=4.0)
    ev = s.evaluation()["ai:easy"]
    assert ev["games"] == 2 and ev["win_rate"] == 0.0 and ev["mean_return"] == ev["recent_mean_return"] == 2.6667
    assert s.train.as_dict()["mean_return"] == 4.0 and s.train.games == 0
    solo = {"games": 0, "episodes": 12, "recent_win_rate": None, "recent_mean_return": 8.25}  # scored by points
    assert "eval solo return 8.2 (12)" in progress_line({"run": {}, "steps": {"agent_steps": 1},
                                                         "games": {"alive": 1, "total": 1, "restarts": 0},
                                                         "evaluation": {"solo": solo}})
    assert "(3, return 2.7)" in progress_line({"run": {}, "steps": {"agent_steps": 1}, "games": {"alive": 1, "total": 1, "restarts": 0},
                                               "evaluation": {"solo": dict(ev, games=3)}})


def test_replay_view_errors(tmp_path):
    with pytest.raises(ReplayError, match="no 'steps'"):
        (tmp_path / "a.json").write_text('{"map": {}}')
        replay_view(tmp_path / "a.json")
    with pytest.raises(ReplayError, match="b.json"):
        replay_view(tmp_path / "b.json")


@pytest.fixture(scope="session")
def duel_replay(tmp_path_factory) -> Path:
    """A 120-step duel replay with states (a battle from step ~80), recorded by the reference game."""
    import subprocess  # noqa: PLC0415

    duel = BUILD / "native" / "duel"
    if not duel.exists():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)
    out = tmp_path_factory.mktemp("replay") / "eval.rep"
    subprocess.run([str(duel), "--record", str(out), "--sides", "ai:normal,ai:hard", "--states", "--max-steps", "120",
                    "--map", "choke"], check=True, capture_output=True)
    return out


# ---- series ---------------------------------------------------------------------------

def test_bins_merge_keeps_sums_and_bounds_points():
    b = Bins(("x",), max_bins=8, width_s=1.0)
    for t in range(100):
        b.add(float(t), x=1.0)
    t, v = b.points("x", "sum")
    assert len(t) <= 8 and v.sum() == 100 and b.width_s == 16
    t, v = b.points("x", "mean")
    assert (v == 1.0).all() and (t[1:] > t[:-1]).all()
    b.add(100.0, x=float("nan"))  # not counted
    assert b.points("x", "sum")[1].sum() == 100


def test_win_rate_line_is_over_the_last_20_games():
    b = Bins(("x",), max_bins=10)
    for t, v in enumerate([1, 0, 0, 1, 1, 1, 0, 0, 0, 1]):
        for _ in range(10):  # 10 games a bin
            b.add(float(t), x=float(v))
    t, y = b.points("x", "trailing")
    assert y.tolist() == [1.0, 0.5, 0.0, 0.5, 1.0, 1.0, 0.5, 0.0, 0.0, 0.5]  # this bin and the one before


def refresh_cost(n_episodes: int) -> float:
    """Seconds per refresh (a poll that finds one new line, /status, /series) of a view
    that already holds n_episodes."""
    s = RunSeries()
    i = np.arange(n_episodes)
    s.add_episodes(T0 + i * 0.5, [("ai:easy", "self", "ai:hard", "self")[k % 4] for k in i], list(i % 2 == 0),
                   [("win", "loss")[k % 3 % 2] for k in i], [100] * n_episodes, [0.0] * n_episodes,
                   list(i // 100))
    j = np.arange(0, n_episodes, 10)
    s.samples.add_many(T0 + j * 0.5, steps_per_s=np.full(len(j), 1000.0), latency_ms=np.full(len(j), 2.0),
                       restarts=j // 1000)
    view = RunView(Path("/nonexistent-run"))
    view.series = view.files.series = s
    t = time.perf_counter()
    reps = 50
    for _ in range(reps):
        view.refresh()
        view.status()
        s.plots()
    return (time.perf_counter() - t) / reps


def test_refresh_cost_is_flat_in_episodes():
    small, big = min(refresh_cost(100) for _ in range(3)), min(refresh_cost(100_000) for _ in range(3))
    assert big < 3 * small + 0.002, (small, big)


def test_batch_and_single_episodes_agree():
    rng = np.random.default_rng(0)
    n = 500
    t = T0 + np.sort(rng.uniform(0, 5000, n))
    opp = [("ai:easy", "ai:normal", "self", "league:3")[k] for k in rng.integers(0, 4, n)]
    ev = [o.startswith("ai:") for o in opp]
    res = [("win", "loss", "draw")[k] for k in rng.integers(0, 3, n)]
    a, b = RunSeries(max_bins=16), RunSeries(max_bins=16)
    a.add_episodes(t, opp, ev, res, [1] * n, [0.0] * n, [0] * n)
    for k in range(n):
        b.add_episode(float(t[k]), opp[k], ev[k], res[k], 1, 0.0, 0)
    assert a.evaluation() == b.evaluation() and a.train.as_dict() == b.train.as_dict()
    assert a.plots() == b.plots() and a.last_episode == b.last_episode
    assert len(a.episodes) == len(b.episodes) == n and a.opponents == b.opponents


def test_tail_reads_only_new_whole_lines(tmp_path):
    p = tmp_path / "x.jsonl"
    tail = Tail(p)
    assert tail.lines() == []
    p.write_bytes(b'{"a": 1}\n{"b"')
    assert tail.lines() == [b'{"a": 1}']
    with open(p, "ab") as f:
        f.write(b': 2}\n')
    assert tail.lines() == [b'{"b": 2}'] and tail.lines() == []
    p.write_bytes(b'{"c": 3}\n')  # rotated: shorter than before
    assert tail.lines() == [b'{"c": 3}']


def test_round_lines_under_one_naming(tmp_path):
    """docs/logs.md's "latency_ms_mean" (what Training writes) is read; "latency_mean_ms" is not."""
    s = RunSeries()
    s.add_round_line(T0, {"rounds": 10, "rows": 80, "latency_ms_mean": 1.5, "latency_ms_max": 3.0,
                          "compute_ms_mean": 0.5, "buckets": {"32": 10}})
    assert s.plots()["latency_ms"][2]["y"] == [3.0] and s.plots()["latency_ms"][0]["y"] == [1.5]
    other = RunSeries()
    other.add_round_line(T0, {"rounds": 10, "rows": 80, "latency_mean_ms": 1.5, "latency_max_ms": 3.0})
    assert all(not any(np.isfinite(ln["y"])) for ln in other.plots()["latency_ms"])


def test_run_files_incremental(tmp_path):
    run = tmp_path / "run"
    write_logs(run, episodes=100)
    files = RunFiles(run)
    first = files.poll()
    assert first > 100 and files.poll() == 0
    with open(run / "episodes.jsonl", "a") as f:
        f.write(line(T0 + 99, "episode", opponent="self", eval=False, result="win", steps=1, policy_version=1))
        f.write("not json\n")
    assert files.poll() == 1 and files.bad_lines == 1 and len(files.series.episodes) == 101


# ---- a finished run from its files: the CLI and the progress line ---------------------

def test_file_mode_status_of_a_finished_run(tmp_path):
    run = tmp_path / "run"
    write_logs(run, seconds=30)
    view = RunView(run)
    view.refresh()
    st = view.status()
    check_status_schema(st)
    assert st["run"]["live"] is False and st["run"]["ended"] and st["run"]["uptime_s"] == 30.0
    assert st["steps"]["agent_steps"] == 30_000 and st["steps"]["per_s"] == 1000.0
    assert st["games"]["stopped"] == 2 and st["games"]["restarts"] == 1
    games = view.games()
    assert [set(g) for g in games] == [set(GAME_KEYS)] * 2 and games[0]["lanes"] == 2 and games[0]["pid"] == 200


def test_progress_line():
    st = {"run": {"recipe": "fgself", "uptime_s": 12.0}, "steps": {"agent_steps": 240000, "per_s": 20011.4},
          "games": {"alive": 8, "total": 8, "failed": 0, "restarts": 3, "restarts_by_cause": {"crash": 2, "hang": 1}},
          "evaluation": {"ai:easy": {"games": 40, "recent_win_rate": 0.71}},
          "learner": {"updates": 52, "update": 52, "update_s": 1.84, "wait_s": 0.12}}
    s = progress_line(st)
    assert s == ("fgself |    12.0 s | 240,000 steps | 20,011 steps/s | eval easy 71% (40) | "
                 "update 1.84 s wait 0.12 s (#52) | 8/8 games up | 3 restarts (crash 2, hang 1)")
    assert "\n" not in s


def test_status_cli(tmp_path, capsys):
    run = tmp_path / "run"
    write_logs(run)
    assert status_cli.main(run) == 0
    out = capsys.readouterr().out
    assert "30,000 steps" in out and "(ended)" in out and "vs ai:easy" in out and "ckpt-00000004.pt" in out
    assert "slot 0 (native): stopped, 1 restarts (crash 1)" in out
    assert status_cli.main(tmp_path / "nothing") == 2
    assert "not a run folder" in capsys.readouterr().err
    # a folder where a log goes (events.jsonl, learner.jsonl) was a traceback: one line, exit 2
    (tmp_path / "odd" / "events.jsonl").mkdir(parents=True)
    assert status_cli.main(tmp_path / "odd") == 2
    assert "not a run folder (no events.jsonl file)" in capsys.readouterr().err
    (run / "learner.jsonl").unlink()
    (run / "learner.jsonl").mkdir()
    assert status_cli.main(run) == 2
    err = capsys.readouterr().err
    assert err == f"w3async status: {run}: cannot read {run / 'learner.jsonl'}: Is a directory\n", err


# ---- a real run --------------------------------------------------------------------------

async def test_live_null_run_served(tmp_path, null_native, capsys):
    """A short null-game run with the server attached: /status and /games follow it, and
    the run's counters agree with the server's after it ends."""
    data = {"name": "statustest", "game": "null",
            "games": [{"binary": str(null_native), "count": 3, "lanes": 2}],
            "supervisor": {"progress_s": 0}, "status": {"enabled": False}, "stop": {"seconds": 3}}
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")  # this test's server is the run's only one
    await sup.setup()  # its parts exist from set-up on (the watch among them)
    server = StatusServer(sup.watch.status_source(), sample_s=0.25)
    port = await server.start()
    task = asyncio.create_task(sup.run())
    seen, cli = [], []
    try:
        async with aiohttp.ClientSession() as s:
            while not task.done():
                async with s.get(f"http://127.0.0.1:{port}/status") as r:
                    st = await r.json()
                check_status_schema(st)
                seen.append(st)
                async with s.get(f"http://127.0.0.1:{port}/games") as r:
                    games = (await r.json())["games"]
                if st["steps"]["agent_steps"] and (tmp_path / "run" / "status.url").exists() and not cli:
                    # `w3async status` on the live run asks this server (from a thread: the
                    # server runs on this loop)
                    cli.append(await asyncio.get_running_loop().run_in_executor(None, status_cli.main, tmp_path / "run"))
                    cli.append(capsys.readouterr().out)
                await asyncio.sleep(0.3)
            stats = await task
            await server.refresh_now()  # the answers are built once a sample: this one after the end
            async with s.get(f"http://127.0.0.1:{port}/status") as r:
                final = await r.json()
    finally:
        await server.stop()
        if not task.done():
            sup.request_stop()
            await task
    running = [x for x in seen if x["games"]["running"] == 3]
    assert running and max(x["steps"]["per_s"] or 0 for x in running) > 100
    assert final["run"]["recipe"] == "statustest" and final["run"]["pid"] is not None
    assert final["steps"]["agent_steps"] == stats["agent_steps"]
    assert final["games"]["stopped"] == 3 and final["run"]["ended"] is not None
    assert len(games) == 3 and all(g["lanes"] == 2 and g["runtime"] == "native" and g["role"] == "train"
                                   for g in games)
    assert cli and cli[0] == 0 and "(live)" in cli[1], cli
    steps = int(re.search(r"\| ([\d,]+) steps \|", cli[1]).group(1).replace(",", ""))
    assert steps > 0 and re.search(r"3/3 games up", cli[1])  # the server's live counters, not the files'
    assert not (tmp_path / "run" / "status.url").exists()  # removed by stop()
    assert status_cli.main(tmp_path / "run") == 0
    assert "(ended)" in capsys.readouterr().out


# ---- the limits: Host, half-open connections, the connection cap, the rate ----------------

async def raw_status(port: int, host: bytes | None) -> bytes:
    head = b"GET /status HTTP/1.1\r\n" + (b"Host: " + host + b"\r\n" if host is not None else b"")
    return await raw_request(port, head + b"Connection: close\r\n\r\n")


async def test_host_header_must_name_this_server(tmp_path):
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 sends
    Host: evil.example; it gets 421 and none of the run's figures."""
    write_logs(tmp_path / "run")
    server = StatusServer(FakeSource(tmp_path / "run"))
    port = await server.start()
    try:
        for host in (b"127.0.0.1:%d" % port, b"localhost:%d" % port, b"LOCALHOST", b"127.0.0.1"):
            resp = await raw_status(port, host)
            assert resp.startswith(b"HTTP/1.1 200"), (host, resp[:80])
        for host in (b"evil.example", b"evil.example:%d" % port, b"127.0.0.1.evil.example", b"127.0.0.1:1"):
            resp = await raw_status(port, host)
            assert resp.startswith(b"HTTP/1.1 421"), (host, resp[:80])
            assert b"agent_steps" not in resp and b"Content-Security-Policy" in resp
        assert server.counters["wrong_host"] == 4
        resp = await raw_status(port, None)  # no Host at all: aiohttp's own 400
        assert re.match(rb"HTTP/1.[01] 400", resp) and b"agent_steps" not in resp
    finally:
        await server.stop()


async def test_an_absolute_form_target_must_name_this_server(tmp_path):
    """`GET http://other.example/status` with `Host: 127.0.0.1` was answered
    200. A target in absolute form names the host the client means (RFC 9112: it wins
    over Host), so it is checked like Host: every other host, a userinfo, another port,
    another scheme get 421 and none of the run's figures; this server's own names pass."""
    write_logs(tmp_path / "run")
    server = StatusServer(FakeSource(tmp_path / "run"))
    port = await server.start()
    try:
        good = [b"http://127.0.0.1:%d/status" % port, b"http://localhost/status", b"HTTP://LOCALHOST:%d/status" % port,
                b"/status"]
        bad = [b"http://other.example/status", b"http://other.example:%d/status" % port, b"http://127.0.0.1:1/status",
               b"http://evil@127.0.0.1:%d/status" % port, b"http://127.0.0.1.evil.example/status",
               b"ftp://127.0.0.1:%d/status" % port]
        for target in good + bad:
            resp = await raw_request(port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                                           b"Connection: close\r\n\r\n" % port)
            if target in good:
                assert resp.startswith(b"HTTP/1.1 200") and b"agent_steps" in resp, (target, resp[:80])
            else:
                assert resp.startswith(b"HTTP/1.1 421"), (target, resp[:80])
                assert b"agent_steps" not in resp, target
        assert server.counters["wrong_host"] == len(bad)
    finally:
        await server.stop()


async def test_a_run_bound_beyond_loopback_records_status_exposed(tmp_path, null_native):
    """A real run (its SupervisorSource, not a fake with `.events`) bound to 0.0.0.0 writes
    the `status_exposed` warning docs/status.md promises (before: only the console line)."""
    from tests.runtime.test_supervisor import events, null_recipe, run_recipe
    data = null_recipe([{"binary": str(null_native), "count": 1, "lanes": 1}],
                       status={"enabled": True, "host": "0.0.0.0", "port": 0}, stop={"seconds": 1})
    await run_recipe(data, tmp_path / "run")
    ev = [e for e in events(tmp_path / "run") if e["event"] == "status_exposed"]
    assert len(ev) == 1 and ev[0]["level"] == "warning" and ev[0]["address"] == "0.0.0.0", ev


async def test_binding_beyond_loopback_warns(tmp_path, capsys):
    write_logs(tmp_path / "run")
    src = FakeSource(tmp_path / "run")
    events = JsonLog(tmp_path / "run" / "events.jsonl")
    server = StatusServer(src, host="0.0.0.0", events=events)
    port = await server.start()
    try:
        assert "beyond this machine" in capsys.readouterr().err
        ev = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
        assert ev[-1]["event"] == "status_exposed" and ev[-1]["level"] == "warning" and ev[-1]["port"] == port
        assert (await raw_status(port, b"127.0.0.1:%d" % port)).startswith(b"HTTP/1.1 200")
        assert (await raw_status(port, socket.gethostname().encode())).startswith(b"HTTP/1.1 200")
        assert (await raw_status(port, b"evil.example")).startswith(b"HTTP/1.1 421")
    finally:
        await server.stop()
        events.close()
    server = StatusServer(FakeSource(tmp_path / "run"))  # loopback: no warning
    await server.start()
    await server.stop()
    assert "beyond this machine" not in capsys.readouterr().err


async def read_until_closed(reader: asyncio.StreamReader, limit_s: float = 30.0) -> bytes:
    """What the server sends until it closes the connection (a generous bound: a server
    that never closes fails the test instead of hanging it)."""
    out = b""
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), limit_s)
        if not chunk:
            return out
        out += chunk


async def test_half_open_and_idle_connections_are_closed(tmp_path):
    """Connections that send nothing, or headers that never end, or that stay idle after
    an answer are closed by the server, which goes on answering."""
    write_logs(tmp_path / "run")
    server = StatusServer(FakeSource(tmp_path / "run"), limits=Limits(idle_timeout_s=2.0))
    port = await server.start()
    conns = []
    try:
        for data in (b"", b"", b"GET /status HTTP/1.1\r\nHost: 127", b"GET /sta", b"GET /status HTTP/1.1\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(data)
            conns.append((reader, writer))
        # one that gets its answer, then stays open with nothing more to ask
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        conns.append((reader, writer))
        got = [await read_until_closed(r) for r, _ in conns]
        assert got[:5] == [b""] * 5  # closed with nothing sent back
        assert got[5].startswith(b"HTTP/1.1 200") and b'"agent_steps"' in got[5]
        assert server.counters["timed_out"] == 5
        assert (await raw_status(port, b"127.0.0.1")).startswith(b"HTTP/1.1 200")
    finally:
        for _, w in conns:
            w.close()
        await server.stop()


async def test_connection_cap_refuses_beyond_it(tmp_path):
    """Beyond max_connections a connection gets a 503 and is closed at once; once one
    closes, a new one is served."""
    write_logs(tmp_path / "run")
    server = StatusServer(FakeSource(tmp_path / "run"), limits=Limits(max_connections=4, idle_timeout_s=60))
    port = await server.start()
    assert server.max_connections == 4
    held = []
    try:
        for _ in range(4):  # four kept-alive connections, each answered once (so surely accepted)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /games HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200")
            held.append((reader, writer))
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            out = await read_until_closed(reader)
            writer.close()
            assert out.startswith(b"HTTP/1.1 503") and b"too many connections" in out
        assert server.counters["refused"] == 3
        held.pop()[1].close()
        for _ in range(100):  # the server sees the close on its own thread, soon
            resp = await raw_status(port, b"127.0.0.1")
            if resp.startswith(b"HTTP/1.1 200"):
                break
            await asyncio.sleep(0.05)
        assert resp.startswith(b"HTTP/1.1 200")
    finally:
        for _, w in held:
            w.close()
        await server.stop()


def test_connection_cap_leaves_the_games_their_file_descriptors():
    lim = Limits()
    # 1024 descriptors, 50 open, 16 slots: (1024 - 50 - 16 * 16 - 128 - 128) // 2 = 231
    assert connection_cap(lim, slots=16, backlog=128, fds_open=50, nofile=1024) == 231
    assert connection_cap(lim, slots=16, backlog=128, fds_open=50, nofile=1 << 20) == lim.max_connections
    assert connection_cap(lim, slots=64, backlog=128, fds_open=50, nofile=1024) == 8  # at least 8


async def test_request_rate_is_limited_per_client(tmp_path):
    """A client asking faster than ip_rate waits its turn; beyond max_wait_s it gets
    429 (after reject_delay_s); every request is answered, and the server goes on."""
    write_logs(tmp_path / "run")
    lim = Limits(ip_rate=5, ip_burst=5, max_wait_s=0.5, reject_delay_s=0.1)
    server = StatusServer(FakeSource(tmp_path / "run"), limits=lim)
    await server.start()
    try:
        async with aiohttp.ClientSession(base_url=server.url) as s:
            async def get():
                async with s.get("/status") as r:
                    await r.read()
                    return r.status, r.headers.get("Retry-After")
            got = await asyncio.gather(*[get() for _ in range(40)])
            codes = collections.Counter(c for c, _ in got)
            assert set(codes) == {200, 429} and 5 <= codes[200] < 40, codes
            assert all(ra == "1" for c, ra in got if c == 429)
            assert server.counters["limited"] == codes[429]
            for _ in range(100):
                status, _ = await get()
                if status == 200:
                    break
                await asyncio.sleep(0.1)
            assert status == 200
    finally:
        await server.stop()


CLIENTS = """
import asyncio, sys, aiohttp
url, n, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
counts = {}
async def client(s):
    while True:
        try:
            async with s.get(url + path) as r:
                await r.read()
                counts[r.status] = counts.get(r.status, 0) + 1
        except aiohttp.ClientError:
            counts["error"] = counts.get("error", 0) + 1
async def main():
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        tasks = [asyncio.create_task(client(s)) for _ in range(n)]
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    print(counts, flush=True)
asyncio.run(main())
"""


async def test_a_real_run_keeps_stepping_under_100_clients(tmp_path, null_native):
    """100 clients polling /status as fast as they can (another process): the null games
    keep stepping, /status follows them, and the server answers the clients (held to
    their address's rate) and us, from another address (127.0.0.2), at once."""
    data = {"name": "statusload", "game": "null", "games": [{"binary": str(null_native), "count": 2, "lanes": 2}],
            "supervisor": {"progress_s": 0}, "status": {"enabled": False}, "stop": {"seconds": 60}}
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")
    await sup.setup()  # its parts exist from set-up on (the watch among them)
    server = StatusServer(sup.watch.status_source(), sample_s=0.25)
    port = await server.start()
    task = asyncio.create_task(sup.run())
    clients = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENTS, server.url, "100", "status",
                                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    seen, codes = [], collections.Counter()
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))) as s:
            while len([x for x in seen if x]) < 3 and not task.done():
                async with s.get(f"http://127.0.0.1:{port}/status") as r:
                    codes[r.status] += 1
                    if r.status == 200:
                        seen.append((await r.json())["steps"]["agent_steps"])
                        await asyncio.sleep(0.5)
            assert not task.done()
            before = sup.agent_steps
            await asyncio.sleep(1.0)
            assert sup.agent_steps > before  # the rounds go on with the clients still polling
    finally:
        out, _ = await clients.communicate(b"")
        sup.request_stop()
        await task
        await server.stop()
    assert seen[-1] > seen[-2] > seen[-3] > 0, seen  # /status follows the run
    assert set(codes) == {200}, codes  # our address has its own share
    counts = eval(out.decode())  # noqa: S307 (our own child's dict of ints)
    assert counts.get(200, 0) >= 20 and set(counts) <= {200, 429}, counts  # the clients are answered
    assert server.counters["served"] >= counts[200]


def test_a_zombie_supervisor_is_not_live(tmp_path):
    """run.lock naming a zombie (exited, never reaped) reads as a finished run, as
    w3async.runtime.procs counts it; a live pid reads as live."""
    run = tmp_path / "run"
    write_logs(run, finished=False)
    child = subprocess.Popen(["true"])
    try:
        while (Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]) != b"Z":
            time.sleep(0.01)  # until it has exited (not reaped: a zombie)
        (run / "run.lock").write_text(json.dumps({"pid": child.pid}))
        assert os.path.exists(f"/proc/{child.pid}") and not RunView(run).live()
        (run / "run.lock").write_text(json.dumps({"pid": os.getpid()}))
        assert RunView(run).live()
    finally:
        child.wait()


def test_a_resumed_run_reads_as_live_from_its_last_start():
    """A run that ended (its shutdown event) and was resumed (a second run_start, its
    supervisor holding run.lock): live, not ended, its uptime counted from the resume.
    Before: ended, with a negative uptime, while it ran."""
    import tempfile

    run = Path(tempfile.mkdtemp()) / "run"
    write_logs(run, seconds=30)
    with open(run / "events.jsonl", "a") as f:
        f.write(line(T0 + 60, "run_start", run=run.name, recipe="fake", pid=os.getpid(), shm="/w3a-y", rows=8, games=2,
                     gather="c", policy="check"))
    (run / "run.lock").write_text(json.dumps({"pid": os.getpid()}))
    view = RunView(run)
    view.refresh()
    st = view.status()["run"]
    assert st["live"] is True and st["ended"] is None and st["uptime_s"] > 0, st
    assert st["started"].startswith(datetime.fromtimestamp(T0 + 60, timezone.utc).isoformat()[:19]), st


def test_an_evaluation_group_without_a_declared_level_is_still_evaluated(tmp_path):
    """The kit's recipe declares no [spec.levels] but has a `role = "eval"` group (its
    opponent "bot"): the run's status shows that group's evaluation (it showed none)."""
    from w3async.observe.run_view import run_levels
    from w3async.recipes import load_recipe, recipe_to_dict

    recipe = load_recipe(REPO / "examples" / "mygame" / "mygame.toml")
    (tmp_path / "recipe.json").write_text(json.dumps(recipe_to_dict(recipe)))
    assert run_levels(tmp_path) == ("bot",)
    assert run_levels(tmp_path / "none") is None
