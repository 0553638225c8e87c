"""The sandbox's boundary where it actually runs (docs/security.md): as root, as CI and
containers run the supervisor, and as an unprivileged user. A game that tries every step
out (tests/rogue/breakout.c: capabilities, a user namespace of its own, unmounting what
hides the run folder, remounting / read-write, the supervisor's memory through the host's
/proc, its network namespace, the host's /dev/shm, the operator's environment, the host's
unix sockets) takes none of them, and the honest games beside it are never blamed."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from w3async.runtime.gamestart import GameStart, game_environ
from w3async.runtime.sandbox import Sandbox, unavailable
from w3async.runtime.wineprefix import SERVER_NAMESPACES, command_name, process_tree, namespaces

from tests.conftest import REPO, need
from tests.runtime.test_hostile_games import rogue  # noqa: F401 (the fixture)
from tests.runtime.test_supervisor import assert_nothing_left, events, null_recipe, run_recipe

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"no sandbox here: {unavailable()}")

# Every step breakout.c takes inside a run, and the ones it takes in a bare sandbox.
IN_A_RUN = {"caps", "userns", "umount", "remount", "procmem", "signal", "setns", "hostshm", "env", "unixsock"}
BARE = IN_A_RUN - {"hostshm"}
SECRET = "W3_BOUNDARY_SECRET"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture(scope="session")
def breakout(tmp_path_factory) -> Path:
    # In a folder anyone may read: the unprivileged case runs it as nobody.
    out = Path(tempfile.mkdtemp(prefix="w3-breakout-")) / "breakout"
    out.parent.chmod(0o755)
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(out), str(REPO / "tests/rogue/breakout.c")], check=True)
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)


@contextlib.contextmanager
def listeners(folder: Path):
    """A TCP listener on 127.0.0.1 and two unix sockets anyone may connect to: one in a
    folder of /tmp, one outside the folders the sandbox makes private (the repository's
    build folder)."""
    paths = [str(folder / "host.sock"), str(REPO / "build" / f"boundary-{os.getpid()}.sock")]
    socks = []
    with socket.socket() as tcp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(8)
        try:
            for p in paths:
                u = socket.socket(socket.AF_UNIX)
                u.bind(p)
                u.listen(8)
                os.chmod(p, 0o777)
                socks.append(u)
            yield paths, tcp.getsockname()[1]
        finally:
            for u, p in zip(socks, paths):
                u.close()
                os.unlink(p)


def steps(log: str) -> dict[str, str]:
    """breakout's steps as it reported them: name -> "ok" or "denied" (unixsock per path)."""
    return {name: how for name, how in re.findall(r"^breakout: (\w+(?: \S+)?) (ok|denied)", log, re.M)}


def assert_all_denied(got: dict[str, str], expected: set[str], log: str) -> None:
    assert {k.split()[0] for k in got} == expected, log
    assert [k for k, v in got.items() if v == "ok"] == [], log
    assert len([k for k in got if k.startswith("unixsock ")]) == 2, log


async def test_a_game_cannot_leave_its_sandbox(tmp_path, breakout, null_native, monkeypatch):
    """As the suite runs (root in CI): the breakout, then an honest game in its place,
    beside 3 honest games. Every step is denied, nothing is planted in the run folder, and
    no game is restarted (today's sandbox as root: umount, remount, procmem, setns and
    hostshm succeeded and 3 honest games were blamed for its garbage)."""
    monkeypatch.setenv(SECRET, "the operator's token")
    run = tmp_path / "run"
    # The honest game beside the breakout, in its folder (the folder a sandbox shows it:
    # a repository under /tmp, as a fresh clone may be, is private in the sandbox).
    honest = breakout.parent / "null_game"
    shutil.copy(null_native, honest)
    with listeners(tmp_path) as (socks, port):
        env = {"W3R_SUP_PID": str(os.getpid()), "W3R_RUN_DIR": str(run.resolve()), "W3R_PORT": str(port),
               "W3R_SECRET": SECRET, "W3R_SOCKS": ":".join(socks), "W3R_THEN": str(honest)}
        data = null_recipe([{"binary": str(breakout), "count": 1, "lanes": 1, "env": env},
                            {"binary": str(null_native), "count": 3, "lanes": 1}],
                           supervisor={"sandbox": "required"}, stop={"seconds": 4})
        sup, stats = await run_recipe(data, run)
    log = (run / "games" / "slot-0.log").read_text(errors="replace")
    assert_all_denied(steps(log), IN_A_RUN, log)
    assert "breakout: hostshm opened 0" in log, log
    assert not (run / "planted").exists()
    for i in range(4):
        assert stats["games"][i]["causes"] == {}, (i, stats["games"][i])
    assert stats["agent_steps"] > 0
    assert_nothing_left(sup, run)


@contextlib.contextmanager
def wineserver_namespaces(user: list[str]):
    """The namespaces of a confined wineserver (wineprefix.ConfinedServer), made by `user`
    around a stand-in server (sleep): what a Windows game's sandbox joins."""
    server = subprocess.Popen(user + ["bwrap", *SERVER_NAMESPACES, "--ro-bind", "/", "/", "--dev", "/dev",
                                      "--proc", "/proc", "--", "sleep", "120"], start_new_session=True)
    try:
        found = []
        for _ in range(1000):
            found = [p for p in process_tree(server.pid) if command_name(p) == "sleep"]
            if found:
                break
            time.sleep(0.01)
        fds = namespaces(found[0])
        try:
            yield fds
        finally:
            for fd in fds:
                os.close(fd)
    finally:
        server.kill()
        server.wait()


def _bare(breakout: Path, user: list[str], socks: list[str], port: int, as_wine: bool = False) -> str:
    """breakout alone in the sandbox a run would give it, started by `user` (a command
    prefix: [] for this process's user, setpriv for another); as_wine: as a Windows
    game's (in its prefix's confined wineserver's user and pid namespaces)."""
    run = Path(tempfile.mkdtemp(prefix="w3-boundary-run-"))
    try:
        run.chmod(0o755)
        (run / "recipe.json").write_text("{}")
        env = game_environ({"W3R_SUP_PID": str(os.getpid()), "W3R_RUN_DIR": str(run), "W3R_PORT": str(port),
                            "W3R_SECRET": SECRET, "W3R_SOCKS": ":".join(socks)})
        group = SimpleNamespace(network=False, env={}, writable=[])
        with wineserver_namespaces(user) if as_wine else contextlib.nullcontext(()) as join:
            start = GameStart([str(breakout)], env, str(breakout.parent), b"", pid_namespace=not as_wine,
                              join=join or None, pass_fds=join)
            argv = Sandbox.for_run("required", run).wrap(start, group)
            out = subprocess.run(user + argv, env=env, capture_output=True, text=True, timeout=60, pass_fds=join)
        assert not (run / "planted").exists()
        return out.stdout + out.stderr
    finally:
        shutil.rmtree(run, ignore_errors=True)


@pytest.mark.parametrize("as_wine", [False, True], ids=["native", "as-wine"])
@pytest.mark.parametrize("user", ["this", "nobody"])
def test_a_bare_sandbox_holds_for_root_and_for_an_unprivileged_user(tmp_path, breakout, monkeypatch, user, as_wine):
    """The same sandbox started by this process's user (root in CI) and by uid 65534
    (setpriv, where this process may switch): every step denied for both, as a native
    game's sandbox and as a Windows game's (its prefix's server's namespaces, joined:
    before, a Windows game kept the host's pids and could signal the supervisor)."""
    if user == "nobody" and os.geteuid() != 0:
        pytest.skip("only root can start a sandbox as another user; this process is unprivileged already")
    monkeypatch.setenv(SECRET, "the operator's token")
    folder = Path(tempfile.mkdtemp(prefix="w3-boundary-socks-"))
    folder.chmod(0o755)
    try:
        with listeners(folder) as (socks, port):
            log = _bare(breakout, NOBODY if user == "nobody" else [], socks, port, as_wine)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert_all_denied(steps(log), BARE, log)


def test_the_steps_work_without_a_sandbox(tmp_path, breakout, monkeypatch):
    """The control: unsandboxed, the harmless steps succeed (the environment reaches the
    game, both sockets connect), so the denials above are the sandbox's doing."""
    monkeypatch.setenv(SECRET, "the operator's token")
    with listeners(tmp_path) as (socks, _):
        env = {**os.environ, "W3R_SECRET": SECRET, "W3R_SOCKS": ":".join(socks)}
        out = subprocess.run([str(breakout)], env=env, capture_output=True, text=True, timeout=60)
    got = steps(out.stdout)
    assert got["env"] == "ok" and [got[f"unixsock {p}"] for p in socks] == ["ok", "ok"], out.stdout
    if os.geteuid() == 0:
        assert got["caps"] == "ok", out.stdout
    assert stat.S_ISREG(os.stat(breakout).st_mode)


def _limits_here(run: Path) -> None:
    """Skip where the machine gives no cgroup (never under CI=true: there it fails)."""
    from tests.runtime.test_supervisor import events
    off = [e for e in events(run) if e["event"] == "limits_off"]
    if off and os.environ.get("CI") == "true":
        pytest.fail(f"no cgroup for the games' limits under CI: {off[0]['reason']}")
    if off:
        pytest.skip(f"no cgroup for the games' limits here: {off[0]['reason']}")


def _rogue_line(run: Path, slot: int, what: str) -> list[str]:
    return re.findall(rf"rogue: {what} ([^\n]*)", (run / "games" / f"slot-{slot}.log").read_text(errors="replace"))


async def test_a_game_cannot_take_the_memory_of_all(tmp_path, rogue, null_native):  # noqa: F811
    """Memory that no RSS shows: one rogue writes 256 MiB to its private /dev/shm (sized
    to 96 MiB: it stops at 96 with ENOSPC), another 256 MiB to its private /tmp, in a
    group capped at max_rss_mb = 48: the kernel ends it inside its own cgroup, and it is
    recycled with cause `memory` (before: 1,536 MiB written, no cap fired). Both run with
    an OOM score of 1000, above the supervisor's. The honest game beside them is never
    restarted."""
    run = tmp_path / "run"
    fill = {"W3R_MODE": "fill", "W3R_FILL_MB": "256"}
    data = null_recipe([{"binary": str(rogue), "count": 1, "lanes": 1, "env": fill},
                        {"binary": str(rogue), "count": 1, "lanes": 1, "max_rss_mb": 48,
                         "env": {**fill, "W3R_FILL_PATH": "/tmp/fill"}},
                        {"binary": str(null_native), "count": 1, "lanes": 1}],
                       supervisor={"sandbox": "required", "game_tmpfs_mb": 96, "max_start_failures": 100},
                       stop={"seconds": 4})
    sup, stats = await run_recipe(data, run)
    small = _rogue_line(run, 0, "filled")
    assert small and all(int(x.split()[0]) <= 96 and "No space left" in x for x in small), small
    assert _rogue_line(run, 0, "oom_score_adj") and set(_rogue_line(run, 0, "oom_score_adj")) == {"1000"}
    _limits_here(run)
    assert stats["games"][1]["causes"].get("memory", 0) >= 1, stats["games"][1]
    assert not [x for x in _rogue_line(run, 1, "filled") if int(x.split()[0]) > 48], _rogue_line(run, 1, "filled")
    assert stats["games"][2]["causes"] == {}, stats["games"][2]
    assert_nothing_left(sup, run)


async def test_a_fork_bomb_is_refused_and_blamed(tmp_path, rogue, null_native):  # noqa: F811
    """A game forks until a fork fails, in a run whose games may have 32 tasks each: it
    stops under 32 and is recycled with cause `processes` (before: no cap, 1,500
    children); the honest game beside it is never restarted."""
    run = tmp_path / "run"
    data = null_recipe([{"binary": str(rogue), "count": 1, "lanes": 1, "env": {"W3R_MODE": "forks"}},
                        {"binary": str(null_native), "count": 1, "lanes": 1}],
                       supervisor={"sandbox": "required", "game_max_procs": 32, "max_start_failures": 100},
                       stop={"seconds": 3})
    sup, stats = await run_recipe(data, run)
    _limits_here(run)
    forked = _rogue_line(run, 0, "forked")
    assert forked and all(int(x.split(":")[0]) < 32 for x in forked), forked
    assert stats["games"][0]["causes"].get("processes", 0) >= 1, stats["games"][0]
    assert stats["games"][1]["causes"] == {}, stats["games"][1]
    assert_nothing_left(sup, run)


@pytest.mark.wine
@pytest.mark.parametrize("network", [False, True])
async def test_winsock_reaches_the_network_only_where_the_group_allows_it(tmp_path, null_exe, network):
    """A Windows game connects to a port open on the host's 127.0.0.1 through Winsock,
    whose sockets the prefix's wineserver makes: with network = false the wineserver runs
    in a network namespace of its own and the connect fails (before: it connected, the
    wineserver being outside every sandbox); with network = true it connects."""
    run = tmp_path / "run"
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        env = {"W3N_ROGUE": "winsock", "W3N_ROGUE_STEP": "5", "W3N_PORT": str(srv.getsockname()[1])}
        data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 1, "network": network, "env": env}],
                           supervisor={"sandbox": "required", "start_timeout_s": 120}, stop={"seconds": 4})
        sup, stats = await run_recipe(data, run)
    log = (run / "games" / "slot-0.log").read_text(errors="replace")
    assert "null: winsock connect" in log, log
    assert ("null: winsock connect ok" in log) == network, log
    assert_nothing_left(sup, run)


@pytest.mark.wine
async def test_a_windows_game_cannot_signal_the_supervisor_by_a_raw_system_call(tmp_path, null_exe):
    """A Windows game makes the Linux kill(supervisor, 0) system call itself, which Wine
    never sees. It runs in its prefix's confined wineserver's pid namespace, where the
    supervisor has no pid: ESRCH (before: it could signal the supervisor, every game of
    every prefix and their wineservers, having the host's pids and the same uid)."""
    run = tmp_path / "run"
    env = {"W3N_ROGUE": "rawkill", "W3N_ROGUE_STEP": "5", "W3N_KILL_PID": str(os.getpid())}
    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 1, "env": env},
                        {"binary": str(null_exe), "runtime": "wine", "count": 1}],
                       runtime={"prefix": "per-game"}, supervisor={"sandbox": "required", "start_timeout_s": 120},
                       stop={"seconds": 4})
    sup, stats = await run_recipe(data, run)
    log = (run / "games" / "slot-0.log").read_text(errors="replace")
    assert f"null: rawkill failed {errno.ESRCH}" in log, log
    assert stats["games"][1]["causes"] == {} and stats["games"][1]["restarts"] == 0, stats["games"][1]
    assert_nothing_left(sup, run)


@pytest.mark.wine
async def test_a_windows_game_cannot_poison_its_prefix_for_the_next_run(tmp_path, null_exe):
    """A Windows game plants a DLL in system32 and a DllOverrides value in its prefix.
    The file fails: C:\\windows is read-only in its sandbox and to its confined
    wineserver, which opens files for it (before: the DLL stayed in the cached prefix for
    the next run). The value is set in the run's registry, which the confined server
    never saves: no prefix holds it after the run."""
    from w3async.runtime.wineprefix import WineConfig, cache_root, resolve_build

    run = tmp_path / "run"
    env = {"W3N_ROGUE": "plant", "W3N_ROGUE_STEP": "5"}
    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 1, "env": env}],
                       supervisor={"sandbox": "required", "start_timeout_s": 120}, stop={"seconds": 4})
    await run_recipe(data, run)
    log = (run / "games" / "slot-0.log").read_text(errors="replace")
    assert "null: plant file failed" in log and "registry ok" in log, log
    cfg = WineConfig()
    root = cache_root(cfg) / resolve_build(cfg).build_id
    prefixes = [p for p in sorted(root.glob("prefix-*")) if p.is_dir()]
    assert prefixes and not [p for p in prefixes if "w3planted" in (p / "user.reg").read_text()]
    assert not [p for p in prefixes if list(p.glob("drive_c/windows/system32/w3-planted.dll"))]


@pytest.mark.wine
def test_a_changed_prefix_is_made_again_before_a_game_gets_it(wine):
    """Where a change reaches a cached prefix anyway (an unprivileged run, whose wineserver
    is not confined; a hand edit), its fingerprint no longer matches: the next run that
    takes it makes it again, saying so, and the change is gone (a DllOverrides value and
    a file in system32, as a game would plant them)."""
    from w3async.runtime.wineprefix import WineConfig, acquire_prefix, changed_since_boot

    cfg = WineConfig()
    first = acquire_prefix(cfg)
    path = first.path
    first.kill()
    first.release()
    reg = path / "user.reg"
    text = reg.read_text()
    at = text.index("[Software\\\\Wine\\\\DllOverrides]")
    end = text.index("\n", text.index("\n", at) + 1) + 1  # after its header and its #time line
    reg.write_text(text[:end] + '"w3planted"="native"\n' + text[end:])
    (path / "drive_c" / "windows" / "system32" / "w3-planted.dll").write_bytes(b"MZ")
    assert "registry" in changed_since_boot(path) and "windows" in changed_since_boot(path)
    again = acquire_prefix(cfg)  # the first free prefix: the same one
    try:
        assert again.path == path and again.remade and "registry" in again.remade
        assert "w3planted" not in reg.read_text()
        assert not (path / "drive_c" / "windows" / "system32" / "w3-planted.dll").exists()
        assert changed_since_boot(path) is None
    finally:
        again.kill()
        again.release()


@pytest.mark.parametrize("limit", ["max_disk_mb", "disk_reserve_mb"])
async def test_a_game_that_fills_its_writable_folder_is_failed_and_the_run_goes_on(tmp_path, rogue, null_native,
                                                                                   limit):
    """A game writes 256 MiB into its replays folder ({run_dir}/replays): over its group's
    max_disk_mb (16), or on a file system with less free than disk_reserve_mb (set above
    this disk's size), its slot is failed with cause `disk`, naming the folder, and the
    run goes on with the honest game beside it (before: a filled disk stopped the run at
    its next checkpoint)."""
    run = tmp_path / "run"
    env = {"W3R_MODE": "fill", "W3R_FILL_MB": "256", "W3R_FILL_PATH": str(run.resolve() / "replays" / "fill"),
           "W3D_RECORD_DIR": "{run_dir}/replays"}
    group = {"binary": str(rogue), "count": 1, "lanes": 1, "env": env}
    supervisor = {"game_tmpfs_mb": 16, "game_file_mb": 1024}  # its one file under the file size cap: the folder's check
    if limit == "max_disk_mb":
        group["max_disk_mb"] = 16
    else:
        supervisor["disk_reserve_mb"] = 2**30
    data = null_recipe([group, {"binary": str(null_native), "count": 1, "lanes": 1}], supervisor=supervisor,
                       stop={"seconds": 4})
    sup, stats = await run_recipe(data, run)
    failed = [e for e in events(run) if e["event"] == "slot_failed"]
    assert len(failed) == 1 and failed[0]["slot"] == 0, failed
    assert str(run.resolve() / "replays") in failed[0]["reason"] and limit in failed[0]["reason"], failed
    assert stats["games"][0]["causes"] == {"disk": 1}, stats["games"][0]
    assert stats["games"][1]["causes"] == {} and stats["agent_steps"] > 0, stats["games"][1]
    assert sup.life.error is None  # the run went on to its stop condition
    assert_nothing_left(sup, run)


# The supervisor as uid 65534: a run of its own, in a Python that user may start.
AS_NOBODY = """
import asyncio, json, sys
from pathlib import Path
from w3async.recipes import recipe_from_dict
from w3async.compose import supervisor
sup = supervisor(recipe_from_dict(json.loads(sys.argv[1])), Path(sys.argv[2]))
stats = asyncio.run(sup.run())
print("RESULT " + json.dumps({"games": stats["games"], "leftovers": sup.leftovers}, default=str))
"""


def python_for_nobody() -> tuple[list[str], str]:
    """A Python 3 of this one's version that uid 65534 may run (this one, or the
    system's where this one lies in a folder only root may enter), with this project and
    its packages on its path."""
    import sys
    import sysconfig
    path = os.pathsep.join(dict.fromkeys([str(REPO), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for exe in [sys.executable, f"/usr/bin/python{version}"]:
        ok = subprocess.run([*NOBODY, exe, "-c", "import numpy"], env={"PYTHONPATH": path, "PATH": os.environ["PATH"]},
                            capture_output=True).returncode == 0
        if ok:
            return [exe, "-c", AS_NOBODY], path
    need("a Python that uid 65534 may run", False, f"apt-get install python{version} (python3)")


@pytest.mark.wine
@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start a run as another user")
def test_an_unprivileged_run_confines_its_wineserver_too(tmp_path, null_exe):
    """The supervisor run by uid 65534, its Windows games with network = false: a raw
    kill() of a process of that user fails (ESRCH: the prefix's pid namespace), Winsock
    does not reach a port on the host's 127.0.0.1, and a DLL planted in system32 fails
    and none is in the prefix after the run. Before, an unprivileged run's wineserver ran
    as it was: it made the game's socket and wrote its file."""
    cmd, pythonpath = python_for_nobody()
    home = Path(tempfile.mkdtemp(prefix="w3-boundary-nobody-"))
    victim = subprocess.Popen([*NOBODY, "sleep", "300"])
    try:
        for p in [home, *[home / d for d in ("cache", "home")]]:
            p.mkdir(exist_ok=True)
            p.chmod(0o755)
            os.chown(p, 65534, 65534)
        with socket.socket() as srv:
            srv.bind(("127.0.0.1", 0))
            srv.listen(8)
            rogues = [{"W3N_ROGUE": "rawkill", "W3N_KILL_PID": str(victim.pid)},
                      {"W3N_ROGUE": "winsock", "W3N_PORT": str(srv.getsockname()[1])}, {"W3N_ROGUE": "plant"}]
            data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 1, "network": False,
                                 "env": {**r, "W3N_ROGUE_STEP": "5"}} for r in rogues],
                               supervisor={"sandbox": "required", "start_timeout_s": 120}, stop={"seconds": 4})
            env = {"PATH": os.environ["PATH"], "HOME": str(home / "home"), "W3ASYNC_CACHE": str(home / "cache"),
                   "PYTHONPATH": pythonpath, "W3ASYNC_SHM_PREFIX": os.environ["W3ASYNC_SHM_PREFIX"]}
            out = subprocess.run([*NOBODY, *cmd, json.dumps(data), str(home / "run")], env=env, capture_output=True,
                                 text=True, timeout=600)
        said = out.stdout + out.stderr
        assert out.returncode == 0 and "RESULT " in out.stdout, said
        result = json.loads(out.stdout.split("RESULT ", 1)[1])
        logs = [(home / "run" / "games" / f"slot-{i}.log").read_text(errors="replace") for i in range(3)]
        assert f"null: rawkill failed {errno.ESRCH}" in logs[0], logs[0]
        assert "null: winsock connect failed" in logs[1], logs[1]
        assert "null: plant file failed" in logs[2], logs[2]
        assert victim.poll() is None
        assert not list((home / "cache").glob("wine/*/prefix-*/drive_c/windows/system32/w3-planted.dll"))
        assert result["leftovers"]["processes"] == [] and result["leftovers"]["wine"] == [], result
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(home, ignore_errors=True)
