"""The status server: every route and its schema (docs/status.md), bad requests, a port
in use, series whose refresh costs the same at 100 and 100,000 episodes, the console
progress line and `w3async status` from a run's files, and a real null-game run."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import aiohttp
import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from w3async import status_cli
from w3async.progress import progress_line
from w3async.recipes import recipe_from_dict
from w3async.series import Bins, RunFiles, RunSeries, Tail
from w3async.status import (GAME_KEYS, ReplayError, RunView, StatusError, StatusServer, SupervisorSource,
                            metrics_text, replay_view)
from w3async.supervisor import Supervisor

from .conftest import BUILD, REPO

T0 = 1_790_000_000.0  # a fixed start: the logs' times are T0 + offsets

STATUS_KEYS = {
    "schema", "time", "run", "steps", "games", "inference", "learner", "league", "evaluation", "episodes", "checkpoint"}
SUB_KEYS = {
    "run": {"name", "dir", "recipe", "pid", "started", "uptime_s", "live", "ended", "error"},
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
TALLY_KEYS = {"games", "wins", "losses", "draws", "win_rate", "recent_games", "recent_win_rate"}


# ---- a run folder written the way docs/logs.md says --------------------------------

def ts(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


def line(t: float, event: str, level: str = "info", **kw) -> str:
    return json.dumps(dict(kw, event=event, level=level, ts=ts(t))) + "\n"


def write_logs(run: Path, episodes: int = 40, seconds: int = 30, updates: int = 5, replay: str | None = None,
               finished: bool = True, slots: int = 2) -> None:
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
                       policy_version=i // 10, replay=replay if ev_ else None))
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

    def __init__(self, run_dir: Path, slots: int = 2):
        self.run_dir = run_dir
        self.steps, self.rounds = 0, 0
        self.restarts = {"crash": 1}
        self.slots = slots

    def stats(self) -> dict:
        return dict(agent_steps=self.steps, rounds=self.rounds, rows_per_round=self.steps / max(self.rounds, 1),
                    seconds=10.0, cpu_s=1.0, bad_rows=0, restarts=dict(self.restarts),
                    games={i: dict(pid=100 + i, state="running", restarts=0, causes={}) for i in range(self.slots)})

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
    json.dumps(st, allow_nan=False)  # no NaN reaches the page


@pytest.fixture
async def served(tmp_path):
    """(client, server, source) over a fake live run with logs."""
    run = tmp_path / "run"
    write_logs(run, finished=False)
    src = FakeSource(run)
    server = StatusServer(src)
    async with TestClient(TestServer(server.app)) as client:
        yield client, server, src


# ---- routes ---------------------------------------------------------------------------

async def test_status_schema_and_values(served):
    client, server, src = served
    server.view.sample(now=1000.0)
    src.steps, src.rounds = 5000, 500
    server.view.sample(now=1002.0)
    r = await client.get("/status")
    assert r.status == 200 and r.content_type == "application/json"
    st = await r.json()
    check_status_schema(st)
    assert st["run"]["live"] is True and st["run"]["recipe"] == "fake" and st["run"]["name"] == "run"
    assert st["steps"] == {"agent_steps": 5000, "per_s": 2500.0, "per_s_60s": 2500.0}  # deltas, not a mean
    assert st["inference"]["rounds_per_s"] == 250.0 and st["inference"]["rows_per_round"] == 10.0
    assert st["inference"]["latency_ms_p95"] == 4.0 and st["inference"]["buckets"] == {"32": 90, "48": 10}
    assert st["games"]["total"] == 2 and st["games"]["alive"] == 2 and st["games"]["restarts_by_cause"] == {"crash": 1}
    src.games_ = [dict(g, causes={"crash": 2, "hang": 1}) for g in src.games()]  # totals sum over slots
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
                     steps=10, policy_version=9, replay=None))
        f.write('{"ts": "2026-')  # a line still being written: not read yet
    st = await (await client.get("/status")).json()
    assert st["episodes"]["total"] == before + 1 and server.view.files.bad_lines == 0


async def test_games_route(served):
    client, *_ = served
    r = await client.get("/games")
    body = await r.json()
    assert r.status == 200 and body["schema"] == 1 and len(body["games"]) == 2
    for g in body["games"]:
        assert set(g) == set(GAME_KEYS)
    assert body["games"][1]["causes"] == {"crash": 1}


PROM_LINE = re.compile(r'^w3async_[a-z0-9_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?[0-9.e+-]+$')


async def test_metrics_prometheus_text(served):
    client, server, src = served
    src.steps = 1234
    server.view.sample()
    r = await client.get("/metrics")
    text = await r.text()
    assert r.status == 200 and r.content_type == "text/plain"
    names = set()
    for ln in text.splitlines():
        if ln.startswith("# TYPE"):
            _, _, name, kind = ln.split()
            assert kind in ("gauge", "counter") and name not in names
            names.add(name)
        elif not ln.startswith("# HELP"):
            assert PROM_LINE.match(ln), ln
    for want in ("w3async_agent_steps_total 1234", 'w3async_games{state="running"} 2',
                 'w3async_game_restarts_total{cause="crash"} 1', 'w3async_eval_games_total{level="ai:easy"} 4',
                 'w3async_inference_latency_ms{stat="p95"} 4', "w3async_learner_updates_total 5",
                 "w3async_league_snapshots 2", "w3async_up 1"):
        assert want in text.splitlines(), want


async def test_page_static_and_series(served):
    client, *_ = served
    r = await client.get("/")
    html = await r.text()
    assert r.status == 200 and r.content_type == "text/html"
    assert "default-src 'self'" in r.headers["Content-Security-Policy"]
    for src in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert src.startswith("/") or src.startswith("data:"), src  # nothing from another host
        if src.startswith("/static/"):
            s = await client.get(src)
            assert s.status == 200, src
            assert "http://" not in await s.text() and "https://" not in await s.text()
    r = await client.get("/series")
    body = await r.json()
    assert set(body["plots"]) == {"steps_per_s", "win_rate", "latency_ms", "update_s", "restarts"}
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


async def test_replay_route_json_duel_and_missing(tmp_path, duel_replay):
    run = tmp_path / "run"
    write_logs(run, finished=False)
    server = StatusServer(FakeSource(run))
    async with TestClient(TestServer(server.app)) as client:
        r = await client.get("/replay/latest")
        assert r.status == 404 and "no evaluation replay" in (await r.json())["error"]
    # a replay in the viewer's own JSON format, named by a relative path
    (run / "replays").mkdir()
    view = dict(map=dict(w=4, h=3, cells=[0] * 12), side=0, steps=[dict(step=0, units=[
        dict(id=1, type=0, owner=0, x=1.5, y=1.5, hp=10, order=0, target=-1)])])
    (run / "replays" / "e1.json").write_text(json.dumps(view))
    write_logs(run, finished=False, replay="replays/e1.json")
    server = StatusServer(FakeSource(run))
    async with TestClient(TestServer(server.app)) as client:
        body = await (await client.get("/replay/latest")).json()
        assert body["map"]["w"] == 4 and body["meta"]["path"] == str(run / "replays" / "e1.json")
    # the duel's own replay file
    mine = tmp_path / "eval.w3dr"  # a copy: the session's fixture stays whole for other tests
    shutil.copy(duel_replay, mine)
    write_logs(run, finished=False, replay=str(mine))
    server = StatusServer(FakeSource(run))
    async with TestClient(TestServer(server.app)) as client:
        body = await (await client.get("/replay/latest")).json()
        assert body["map"]["w"] == 32 and sum(body["map"]["cells"]) > 0 and len(body["steps"]) == 120
        u = body["steps"][-1]["units"][0]
        assert set(u) == {"id", "type", "owner", "x", "y", "hp", "order", "target", "dest"}
        assert body["meta"]["sides"] == ["ai:normal", "ai:hard"] and body["types"][0]["name"] == "base"
        # a broken file: a 404 with the reason, and the server goes on
        mine.write_bytes(b"W3DREPL1 broken")
        r = await client.get("/replay/latest")
        assert r.status == 404 and "replay" in (await r.json())["error"]
        assert (await client.get("/status")).status == 200


async def test_replay_falls_back_to_the_newest_file_in_replays(tmp_path, duel_replay):
    """While no episode names a replay, the newest finished file in replays/ is shown."""
    run = tmp_path / "run"
    write_logs(run, finished=False)
    (run / "replays").mkdir()
    (run / "replays" / "old.w3dr").write_bytes(b"not this one")
    os.utime(run / "replays" / "old.w3dr", (T0, T0))
    shutil.copy(duel_replay, run / "replays" / "duel-l1-e2-00ff.w3dr")
    (run / "replays" / "duel-l1-e3-0100.w3dr.part").write_bytes(b"being written")
    server = StatusServer(FakeSource(run))
    async with TestClient(TestServer(server.app)) as client:
        st = await (await client.get("/status")).json()
        assert st["episodes"]["last_eval_replay"] == str(run / "replays" / "duel-l1-e2-00ff.w3dr")
        body = await (await client.get("/replay/latest")).json()
        assert len(body["steps"]) == 120


def test_truncated_episodes_count_but_not_in_win_rates():
    s = RunSeries()
    s.add_episode(T0, "ai:easy", True, "win")
    s.add_episode(T0 + 1, "ai:easy", True, "truncated")
    s.add_episode(T0 + 2, "self", False, "truncated")
    assert len(s.episodes) == 3 and s.evaluation()["ai:easy"]["games"] == 1 and s.train.games == 0


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
                   list(i // 100), [None] * n_episodes)
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
    a.add_episodes(t, opp, ev, res, [1] * n, [0.0] * n, [0] * n, ["r%d" % k for k in range(n)])
    for k in range(n):
        b.add_episode(float(t[k]), opp[k], ev[k], res[k], 1, 0.0, 0, "r%d" % k)
    assert a.evaluation() == b.evaluation() and a.train.as_dict() == b.train.as_dict()
    assert a.plots() == b.plots() and a.last_eval_replay == b.last_eval_replay
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


def test_round_lines_in_either_naming(tmp_path):
    """RoundStatsWindow.flush()'s "latency_mean_ms" reads as docs/logs.md's "latency_ms_mean"."""
    s = RunSeries()
    s.add_round_line(T0, {"rounds": 10, "rows": 80, "latency_mean_ms": 1.5, "latency_max_ms": 3.0,
                          "compute_mean_ms": 0.5, "buckets": {"32": 10}})
    assert s.last_round["latency_ms_mean"] == 1.5 and s.last_round["latency_ms_max"] == 3.0
    assert s.plots()["latency_ms"][2]["y"] == [3.0]


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


# ---- a real run --------------------------------------------------------------------------

async def test_live_null_run_served(tmp_path, null_native, capsys):
    """A short null-game run with the server attached: /status and /games follow it, and
    the run's counters agree with the server's after it ends."""
    data = {"name": "statustest", "game": "null",
            "games": [{"binary": str(null_native), "count": 3, "lanes": 2}],
            "supervisor": {"progress_s": 0}, "stop": {"seconds": 3}}
    sup = Supervisor(recipe_from_dict(data), tmp_path / "run")
    server = StatusServer(SupervisorSource(sup), sample_s=0.25)
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
