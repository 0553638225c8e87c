"""The sandbox around each game start (w3async/runtime/sandbox.py, docs/security.md), with
the rogue game (tests/rogue/rogue_game.c) beside honest null games: a rogue that writes
its neighbours' segments by name opens none of them and nobody honest is blamed; no
network unless the group allows it; a helper that escapes its game's process group
(setsid, a double fork) dies with a SIGKILLed supervisor, and unsandboxed the next run
finds it; "required" refuses a machine without bwrap, naming the fix."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from w3async import compose
from w3async.runtime import procs
from w3async.runtime.sandbox import unavailable
from w3async.sync.table import list_segments

from tests.conftest import REPO
from tests.runtime.test_hostile_games import rogue  # noqa: F401 (the fixture)
from tests.runtime.test_supervisor import _cli, assert_nothing_left, events, null_recipe, run_recipe

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"no sandbox here: {unavailable()}")


def _opened(log: Path) -> list[int]:
    return [int(n) for n in re.findall(r"rogue: opened (\d+) neighbour segments", log.read_text(errors="replace"))]


@pytest.mark.parametrize("sandbox", ["preferred", "off"])
async def test_a_rogue_cannot_open_its_neighbours_segments(tmp_path, rogue, null_native, sandbox):  # noqa: F811
    """Sandboxed: the rogue opens none of the 3 honest games' segments, every honest game
    runs its whole time without a restart, the rogue is never restarted either (it harmed
    nobody). Unsandboxed (the control): the same rogue opens them."""
    run = tmp_path / "run"
    data = null_recipe([{"binary": str(rogue), "count": 1, "lanes": 1, "env": {"W3R_MODE": "neighbours"}},
                        {"binary": str(null_native), "count": 3, "lanes": 1}],
                       supervisor={"sandbox": sandbox}, stop={"seconds": 4})
    sup, stats = await run_recipe(data, run)
    opened = _opened(run / "games" / "slot-0.log")
    assert opened, "the rogue never tried"
    if sandbox == "off":
        assert max(opened) >= 3, opened  # the attack works without the sandbox
        return
    assert set(opened) == {0}, opened
    assert all(e["sandboxed"] for e in events(run) if e["event"] == "game_start")
    for i in range(4):
        assert stats["games"][i]["causes"] == {}, (i, stats["games"][i])
    assert stats["agent_steps"] > 0
    assert_nothing_left(sup, run)


async def test_no_network_unless_the_group_allows_it(tmp_path, rogue):  # noqa: F811
    """Two groups connect to a port open on 127.0.0.1: network = false cannot, network = true can."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        env = {"W3R_MODE": "connect", "W3R_PORT": str(srv.getsockname()[1])}
        data = null_recipe([{"binary": str(rogue), "count": 1, "lanes": 1, "env": env},
                            {"binary": str(rogue), "count": 1, "lanes": 1, "env": env, "network": True}],
                           stop={"seconds": 2})
        sup, stats = await run_recipe(data, tmp_path / "run")
    closed = (tmp_path / "run" / "games" / "slot-0.log").read_text()
    allowed = (tmp_path / "run" / "games" / "slot-1.log").read_text()
    assert "rogue: connect failed" in closed and "rogue: connect ok" not in closed, closed
    assert "rogue: connect ok" in allowed, allowed
    assert_nothing_left(sup, tmp_path / "run")


def _recipe_file(tmp_path: Path, rogue: Path, null_native: Path, sandbox: str) -> Path:
    rec = tmp_path / "escape.toml"
    rec.write_text(f'name = "escape"\n[supervisor]\nsandbox = "{sandbox}"\nprogress_s = 0\n'
                   f'[[games]]\nbinary = "{rogue}"\nlanes = 1\nenv = {{ W3R_MODE = "escape" }}\n'
                   f'[[games]]\nbinary = "{null_native}"\nlanes = 1\n')
    return rec


@pytest.mark.parametrize("sandbox", ["preferred", "off"])
def test_a_sigkilled_runs_escaped_helpers_end(tmp_path, rogue, null_native, sandbox):  # noqa: F811
    """A game's helper calls setsid and double-forks; the supervisor is SIGKILLed.
    Sandboxed, the helper dies with it (the start's pid namespace); unsandboxed it
    outlives it, and the next run on the folder finds it by the run's marker and ends it."""
    runs = tmp_path / "runs"
    rec = _recipe_file(tmp_path, rogue, null_native, sandbox)
    args = ["run", str(rec), "--run", "k", "--runs-dir", str(runs)]
    p = subprocess.Popen([sys.executable, "-m", "w3async", *args, "--set", "stop.seconds=60"], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = runs / "k" / "games" / "slot-0.log"
    deadline = time.time() + 60
    while time.time() < deadline and not (log.exists() and "rogue: escaped pid" in log.read_text(errors="replace")):
        time.sleep(0.1)
    shm = [e for e in events(runs / "k") if e["event"] == "run_start"][0]["shm"]
    marker = shm.lstrip("/").encode()
    game = [e["pid"] for e in events(runs / "k") if e["event"] == "game_start" and e["slot"] == 0][0]
    escaped = [x for x in procs.mentioning(marker) if (procs.stat_fields(x) or [b""] * 4)[3] != str(game).encode()]
    assert escaped, "the helper did not escape"
    p.kill()
    p.wait()
    left = sorted({d.name for d in Path("/sys/fs/cgroup").glob(f"*/w3async-{p.pid}-*")}
                  | {d.name for d in Path("/sys/fs/cgroup").glob(f"w3async-{p.pid}-*")})
    limits_off = [e for e in events(runs / "k") if e["event"] == "limits_off"]
    assert left or limits_off, "the run had cgroups, and a SIGKILL leaves them"
    deadline = time.time() + 5
    while sandbox != "off" and procs.mentioning(marker) and time.time() < deadline:
        time.sleep(0.05)
    if sandbox != "off":
        assert procs.mentioning(marker) == [], "a sandboxed game's helper outlived the SIGKILLed supervisor"
    else:
        helper = int(re.findall(r"rogue: escaped pid (\d+)", log.read_text())[0])  # its real pid (no namespace)
        assert procs.alive(helper), "unsandboxed, the escaped helper should outlive the kill"
    r = _cli([*args, "--set", "stop.seconds=1"])
    assert r.returncode == 0, r.stderr
    assert procs.mentioning(marker) == [], "a process of the dead run is still alive"
    assert not [s for s in list_segments() if s.startswith(shm)]
    prev = [e for e in events(runs / "k") if e["event"] == "previous_run"]
    assert len(prev) == 1 and (sandbox != "off" or helper in prev[0]["killed"]), prev
    # Its cgroup folders are swept by the next run (any run: by the dead supervisor's pid).
    assert not list(Path("/sys/fs/cgroup").glob(f"*/w3async-{p.pid}-*")) + list(Path("/sys/fs/cgroup").glob(
        f"w3async-{p.pid}-*")), "the dead run's cgroups were left"
    swept = [n for e in events(runs / "k") if e["event"] == "cgroups_swept" for n in e["names"]]
    assert set(left) <= set(swept), (left, swept)


def test_required_without_bwrap_refuses_naming_the_fix(tmp_path, null_native):
    """PATH without bwrap: "required" is refused before anything starts, with the fix;
    "preferred" runs unsandboxed with a sandbox_off warning."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink("/usr/bin/nice", bindir / "nice")
    env = {**os.environ, "PATH": str(bindir)}
    args = ["run", "null", "--runs-dir", str(tmp_path / "runs"), "--set", "stop.seconds=1"]
    r = _cli([*args, "--run", "req", "--set", "supervisor.sandbox=required"], env=env)
    assert r.returncode != 0
    assert "supervisor.sandbox = \"required\": bwrap (bubblewrap) is not on PATH" in r.stderr, r.stderr
    assert "apt-get install bubblewrap" in r.stderr, r.stderr
    assert not (tmp_path / "runs" / "req" / "events.jsonl").exists()
    r = _cli([*args, "--run", "pref"], env=env)
    assert r.returncode == 0, r.stderr
    evs = events(tmp_path / "runs" / "pref")
    assert [e for e in evs if e["event"] == "sandbox_off"][0]["reason"] == "bwrap (bubblewrap) is not on PATH"
    starts = [e for e in evs if e["event"] == "game_start"]
    assert starts and not any(e["sandboxed"] for e in starts)


@pytest.mark.wine
@pytest.mark.parametrize("sandbox", ["preferred", "off"])
async def test_a_windows_rogue_cannot_open_its_neighbours_fifos_or_segments(tmp_path, null_exe, sandbox):
    """A Windows game opens every other game's segment (Z:\\dev\\shm\\...) and act FIFO by
    path: sandboxed it opens none, and the two honest Wine games run without a restart;
    unsandboxed (the control) it opens them."""
    run = tmp_path / "run"
    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 1,
                         "env": {"W3N_ROGUE": "peek", "W3N_ROGUE_STEP": "20"}},
                        {"binary": str(null_exe), "runtime": "wine", "count": 2}],
                       supervisor={"sandbox": sandbox, "start_timeout_s": 120}, stop={"seconds": 6})
    sup, stats = await run_recipe(data, run)
    found = re.findall(r"null: peek opened (\d+) of (\d+) neighbour paths", (run / "games" / "slot-0.log").read_text())
    assert found, "the rogue never tried"
    opened, tried = map(int, found[0])
    if sandbox == "off":
        assert opened >= 4, found  # two neighbours' segments and act FIFOs
        return
    assert opened == 0 and tried > 0, found
    for i in range(3):
        assert stats["games"][i]["causes"] == {}, (i, stats["games"][i])
    assert_nothing_left(sup, run)


@pytest.mark.wine
async def test_a_prefix_per_game_gives_each_windows_game_its_own_wineserver(tmp_path, null_exe):
    """[runtime] prefix = "per-game": two Wine games, two prefixes, two wineservers; both
    step, and nothing is left."""
    import asyncio

    from w3async.recipes import recipe_from_dict
    from w3async.compose import supervisor

    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 2}], runtime={"prefix": "per-game"},
                       supervisor={"start_timeout_s": 120}, stop={"seconds": 60})
    sup = compose.supervisor(recipe_from_dict(data), tmp_path / "run")
    task = asyncio.ensure_future(sup.run())
    for _ in range(1200):
        await asyncio.sleep(0.1)
        if sup.slots and all(s.posted for s in sup.slots):
            break
    prefixes = {str(rt.prefix.path) for rt in sup.runtimes.values() if getattr(rt, "prefix", None)}
    servers = {p: [x for x in procs.with_env("WINEPREFIX", p) if open(f"/proc/{x}/comm").read().startswith("wineserver")]
               for p in prefixes}  # (by name: the bwrap around a confined server has it in its command line)
    sup.request_stop()
    stats = await task
    assert len(prefixes) == 2, prefixes
    assert all(len(v) == 1 for v in servers.values()), servers
    assert all(g["causes"] == {} for g in stats["games"].values()), stats["games"]
    assert_nothing_left(sup, tmp_path / "run")


@pytest.mark.wine
@pytest.mark.parametrize("prefix", ["shared", "per-game"])
async def test_a_windows_game_ends_the_games_of_its_prefix_only(tmp_path, null_exe, prefix):
    """What the sandbox leaves open within a prefix, measured: a Windows game (sandboxed)
    lists the processes Wine shows it and ends every other null_game.exe by
    OpenProcess + TerminateProcess. In a shared prefix it ends both honest games; with a
    prefix per game it sees none of them, and they run on without a restart."""
    run = tmp_path / "run"
    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 2},
                        {"binary": str(null_exe), "runtime": "wine", "count": 1,
                         "env": {"W3N_ROGUE": "terminate", "W3N_ROGUE_STEP": "2000"}}],
                       runtime={"prefix": prefix}, supervisor={"start_timeout_s": 120},
                       stop={"seconds": 8 if prefix == "shared" else 16})
    sup, stats = await run_recipe(data, run)
    found = re.findall(r"null: terminated (\d+) other games", (run / "games" / "slot-2.log").read_text())
    assert found, "the rogue never tried"
    assert all(e["sandboxed"] for e in events(run) if e["event"] == "game_start")
    honest = [stats["games"][i]["causes"] for i in (0, 1)]
    if prefix == "shared":
        assert int(found[0]) == 2, found
        # Each restarted; Wine hands the supervisor exit 0 for a process another ended
        # (TerminateProcess(9)), so the keeper counts it as a recycle.
        assert all(sum(c.values()) >= 1 for c in honest), honest
    else:
        assert found == ["0"], found
        assert honest == [{}, {}], honest
    assert_nothing_left(sup, run)


def test_a_sandboxed_start_writes_only_where_its_recipe_says(tmp_path):
    """Through the sandbox a start gets (sandbox.wrap, a shell for a game): the run folder's
    files are hidden, / is read-only, a folder under /tmp named by an env value does not
    bring the run folder back, and the replays folder its env names is written for real."""
    import types

    from w3async.runtime.gamestart import GameStart
    from w3async.runtime.sandbox import Sandbox

    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_text("weights")
    outside = tmp_path / "scratch"
    outside.mkdir()
    group = types.SimpleNamespace(env={"REC": "{run_dir}/replays", "TMP": str(tmp_path)}, writable=[], network=False)
    script = (f"cat {run}/checkpoint.pt && echo SAW; echo x > {run}/checkpoint.pt; "
              f"touch /usr/w3async-probe 2>/dev/null && echo ROOT_WRITABLE; "
              f"echo replay > {run}/replays/r.bin && echo REPLAY_OK; echo s > {outside}/s && echo SCRATCH_OK")
    start = GameStart(["/bin/sh", "-c", script], dict(os.environ), "/", b"")
    out = subprocess.run(Sandbox(run, "bwrap").wrap(start, group), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "SAW" not in out.stdout and "ROOT_WRITABLE" not in out.stdout, out.stdout
    assert (run / "checkpoint.pt").read_text() == "weights"
    assert "REPLAY_OK" in out.stdout and (run / "replays" / "r.bin").read_text() == "replay\n"
    assert "SCRATCH_OK" in out.stdout  # an existing absolute folder named by an env value


@pytest.mark.wine
@pytest.mark.parametrize("prefix", ["shared", "per-game"])
async def test_named_objects_are_shared_within_a_prefix_only(tmp_path, null_exe, prefix):
    """What else the sandbox leaves open within a prefix, measured: Windows named objects live
    in the prefix's wineserver. Two games each make a named mutex, event and pipe (as a game
    that keeps itself to one instance does): in a shared prefix the second finds all three
    the first's; with a prefix per game each has its own."""
    run = tmp_path / "run"
    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 2,
                         "env": {"W3N_ROGUE": "named", "W3N_ROGUE_STEP": "20"}}],
                       runtime={"prefix": prefix}, supervisor={"start_timeout_s": 120}, stop={"seconds": 8})
    sup, stats = await run_recipe(data, run)
    said = [re.findall(r"null: named mutex (\w+) event (\w+) pipe (\w+)", (run / "games" / f"slot-{i}.log").read_text())
            for i in (0, 1)]
    assert all(said), ("a game never tried", said)
    seen = sorted(tuple(s[0]) for s in said)
    if prefix == "shared":
        assert seen == [("own", "own", "own"), ("shared", "shared", "shared")], seen
    else:
        assert seen == [("own", "own", "own")] * 2, seen
    assert all(g["causes"] == {} for g in stats["games"].values()), stats["games"]
    assert_nothing_left(sup, run)


@pytest.mark.wine
async def test_a_sandboxed_opengl_game_keeps_a_shader_cache_of_its_own(tmp_path, wine, mingw):
    """A Windows program that draws with OpenGL (tests/inject/gl_draw.c) under display =
    "xvfb", sandboxed: Mesa writes its shader cache into the slot's own folder of the
    run (shader-cache/slot-0), where before it could not create ~/.cache (read-only in
    the sandbox) and disabled the cache, so each start compiled every shader again.
    gl_draw never posts: its start fails after it has drawn, and the run fails with it."""
    import shutil

    from tests.conftest import need
    from w3async.runtime.runfolder import RunError

    need("Xvfb", bool(shutil.which("Xvfb")), "apt-get install xvfb")
    exe = tmp_path / "gl_draw.exe"
    subprocess.run([mingw, "-O2", "-Wall", "-o", str(exe), str(REPO / "tests/inject/gl_draw.c"), "-lopengl32",
                    "-lgdi32"], check=True)
    data = null_recipe([{"binary": str(exe), "runtime": "wine", "count": 1}], runtime={"display": "xvfb"},
                       supervisor={"sandbox": "required", "start_timeout_s": 60, "max_start_failures": 1},
                       stop={"seconds": 60})
    run = tmp_path / "run"
    with pytest.raises(RunError):
        await run_recipe(data, run)
    log = (run / "games" / "slot-0.log").read_text(errors="replace")
    assert "gl_draw: drawn" in log and "llvmpipe" in log, log
    assert "shader_cache" not in log and "disabling" not in log, log  # Mesa's "Failed to create ... disabling"
    cached = [p for p in (run / "shader-cache" / "slot-0").rglob("*") if p.is_file()]
    assert cached and sum(p.stat().st_size for p in cached) > 0, cached
