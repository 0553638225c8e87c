"""The dashboard in headless Chromium against a live short run: the page loads with no
console error, every plot draws data, and the viewer steps through a replay (clicked,
played, slid). A screenshot is kept in test-artifacts/dashboard.png.

The run is a real supervisor with null games (one of them crashing now and then, so
restarts move); the learner's logs (inference, learner, episodes with evaluation
replays) are appended live by the test in the docs/logs.md schemas, since null games
have no learner. Chromium is driven over the DevTools protocol with aiohttp's
websocket client: nothing to download.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import time
from pathlib import Path

import aiohttp
import pytest

from w3async.recipes import recipe_from_dict
from w3async.observe.status import StatusServer
from w3async.compose import supervisor

from w3async.observe.replay_view import replay_view
from w3async.observe.video import VIDEO_DIR, encode_mp4, render_frames

from tests.conftest import REPO, need
from tests.observe.test_status import duel_replay, line  # noqa: F401 (a fixture)

ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-quic", "--disable-dev-shm-usage",
                  "--window-size=1280,1500", "--remote-debugging-port=0"]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """A headless Chromium of our own (fresh profile, own process group) and one page
    driven over the DevTools protocol. Every event is kept in `events`."""

    def __init__(self, exe: str, profile: Path):
        self.exe, self.profile = exe, profile
        self.proc: asyncio.subprocess.Process | None = None
        self.events: list[dict] = []
        self._id = 0
        self._pending: dict[int, asyncio.Future] = {}

    async def __aenter__(self) -> Chromium:
        self.log = open(self.profile.parent / "chromium.log", "wb")
        self.proc = await asyncio.create_subprocess_exec(
            self.exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank",
            stdout=self.log, stderr=self.log, start_new_session=True)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.returncode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not open its DevTools port: see {self.log.name}")
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        self.session = aiohttp.ClientSession()
        async with self.session.get(f"http://127.0.0.1:{port}/json/list") as r:
            pages = [t for t in await r.json() if t["type"] == "page"]
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=64 << 20)
        self._reader = asyncio.create_task(self._read())
        for domain in ("Runtime", "Log", "Page"):
            await self.call(f"{domain}.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        self._reader.cancel()
        await self.ws.close()
        await self.session.close()
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            if self.proc.returncode is not None:
                break
            try:
                os.killpg(self.proc.pid, sig)  # its own group: the renderers and helpers too
            except ProcessLookupError:
                break
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except asyncio.TimeoutError:
                pass
        self.log.close()

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            fut = self._pending.pop(data.get("id"), None)
            if fut is not None:
                fut.set_result(data)
            else:
                self.events.append(data)

    async def call(self, method: str, **params) -> dict:
        self._id += 1
        fut = asyncio.get_running_loop().create_future()
        self._pending[self._id] = fut
        await self.ws.send_json({"id": self._id, "method": method, "params": params})
        data = await asyncio.wait_for(fut, 30)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data["result"]

    async def js(self, expr: str):
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    async def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element."""
        box = await self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            f".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    async def wait_for(self, expr: str, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while True:
            v = await self.js(expr)
            if v:
                return v
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expr}: w3Status = {await self.js('JSON.stringify(window.w3Status)')}")
            await asyncio.sleep(0.25)

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args"))[:500])
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"{p['entry'].get('text')} {p['entry'].get('url', '')}")
        return out


async def feed_learner_logs(run: Path) -> None:
    """What the learner integration writes (docs/logs.md), a few lines a second."""
    levels = ("ai:easy", "ai:normal", "ai:hard")
    i = 0
    while True:
        now = time.time()
        with open(run / "inference.jsonl", "a") as f:
            f.write(line(now, "rounds", rounds=900 + i, rows=7000, rows_per_round=7.5, latency_ms_mean=1.0 + i % 5 / 10,
                         latency_ms_p95=2.5, compute_ms_mean=0.4, buckets={"32": 900}, learner_phase="idle"))
        with open(run / "learner.jsonl", "a") as f:
            f.write(line(now, "update", update=i + 1, update_s=1.2 + i % 3 / 10, wait_s=0.2, staleness=1.0,
                         policy_loss=-0.02, value_loss=0.4, entropy=1.9, approx_kl=0.003, lr=3e-4, steps=2048))
        with open(run / "episodes.jsonl", "a") as f:
            for k in range(3):
                f.write(line(now, "episode", slot=k, lane=0, side=0, opponent=levels[(i + k) % 3], eval=True,
                             result=("win", "loss", "draw")[(i + 2 * k) % 3], steps=200, **{"return": 0.5},
                             policy_version=i, discarded=(i + k) % 4))
            f.write(line(now, "episode", slot=0, lane=1, side=1, opponent="self", eval=False, result="win", steps=200,
                         **{"return": 1.0}, policy_version=i))
        i += 1
        await asyncio.sleep(0.4)


async def test_dashboard_in_headless_chromium(tmp_path, null_native, duel_replay):  # noqa: F811
    exe = chromium_path()
    need("chromium", exe is not None, "apt-get install chromium (Debian's package; .ci/run installs it)")
    run = tmp_path / "run"
    data = {"name": "browsertest", "game": "null",
            "games": [{"binary": str(null_native), "count": 2, "lanes": 2},
                      {"binary": str(null_native), "count": 1, "env": {"W3N_ROGUE": "crash", "W3N_ROGUE_STEP": "3000"}}],
            "supervisor": {"progress_s": 0, "backoff_s": 0.05, "backoff_max_s": 0.2}, "stop": {"seconds": 120}}
    sup = supervisor(recipe_from_dict(data), run)
    replay = run / "replays" / "eval-0001.w3dr"  # served only from inside the run folder
    await sup.setup()  # its parts exist from set-up on (the watch among them)
    source = sup.watch.status_source()
    source.latest_replay_path = lambda: str(replay)  # the null game records none: the source names the duel's
    server = StatusServer(source, sample_s=0.5)
    port = await server.start()
    run_task = asyncio.create_task(sup.run())
    replay.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(duel_replay, replay)
    feeder = asyncio.create_task(feed_learner_logs(run))
    # an evaluation video (what the learning run's video thread writes: observe/video.py)
    (run / VIDEO_DIR).mkdir()
    video = encode_mp4(render_frames(replay_view(replay, "duel"), max_frames=20, max_side_px=160),
                       run / VIDEO_DIR / "eval-000000004096.mp4")
    profile = tmp_path / "profile"
    profile.mkdir()
    try:
        async with Chromium(exe, profile) as page:
            await page.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
            plots = await page.wait_for(
                "(() => { const p = window.w3Status && window.w3Status.plots; const n = ['steps_per_s', 'win_rate', "
                "'latency_ms', 'update_s', 'restarts', 'discarded', 'cores', 'memory_mb'].map(k => (p || {})[k] || 0); "
                "return n.every(x => x >= 2) && p && window.w3Status.viewer.loaded ? window.w3Status.plots : null; })()",
                timeout=45)
            assert all(v >= 2 for v in plots.values()), plots
            steps = await page.js("window.w3Status.viewer.steps")
            assert steps == 120  # the recorded duel replay's steps
            # step forward with the button, play, then jump with the slider
            assert await page.js("window.w3Status.viewer.step") == 0
            await page.click("#viewer-next")
            await page.click("#viewer-next")
            assert await page.js("window.w3Status.viewer.step") == 2
            frames = await page.js("window.w3Status.viewer.frames")
            await page.click("#viewer-play")
            await page.wait_for("window.w3Status.viewer.step >= 8", timeout=10)
            await page.click("#viewer-play")  # pause
            paused = await page.js("window.w3Status.viewer.step")
            await asyncio.sleep(0.5)
            assert await page.js("window.w3Status.viewer.step") == paused
            await page.js("(() => { const s = document.getElementById('viewer-slider'); s.value = '85'; "
                          "s.dispatchEvent(new Event('input')); })()")
            assert await page.js("window.w3Status.viewer.step") == 85  # mid-battle: the screenshot shows it
            assert await page.js("window.w3Status.viewer.frames") > frames + 5
            assert await page.js("window.w3Status.viewer.units") > 2
            # the summary shows the live run
            text = await page.js("document.getElementById('summary').innerText")
            assert "agent steps" in text and "vs ai:easy" in text
            assert await page.js("document.getElementById('run-state').textContent") == "live"
            assert await page.js("document.querySelectorAll('#games tbody tr').length") == 3
            # the accounting's columns: each game's cores and RSS (MiB)
            cells = await page.js("[...document.querySelectorAll('#games tbody tr')].map(r => "
                                  "[...r.children].slice(-2).map(c => c.textContent))")
            assert all(c != "–" and float(c) >= 0 for row in cells for c in row) and any(
                float(row[1]) > 0 for row in cells), cells
            assert await page.js("window.w3Status.errors.length") == 0
            # the evaluation videos: a link each, which serves the mp4
            await page.wait_for("(window.w3Status.videos || []).length >= 1", timeout=10)
            assert await page.js("[...document.querySelectorAll('#videos a')].map(a => a.textContent)") == [video.name]
            got = await page.js("fetch(document.querySelector('#videos a').href).then(async r => "
                                "[r.status, r.headers.get('content-type'), (await r.arrayBuffer()).byteLength])")
            assert got == [200, "video/mp4", video.stat().st_size], got
            shot = await page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            ARTIFACTS.mkdir(exist_ok=True)
            (ARTIFACTS / "dashboard.png").write_bytes(base64.b64decode(shot["data"]))
            errors = page.console_errors()
            assert errors == [], errors
    finally:
        feeder.cancel()
        sup.request_stop()
        await run_task
        await server.stop()
    restarts = sup.stats()["restarts"]
    assert restarts.get("crash", 0) >= 1  # the crashing slot really restarted during the test
