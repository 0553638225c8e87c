"""The supervisor with real games: many null games answered and checked, restarts with
their causes, bad input reported by name, and nothing left behind after shutdown."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from w3async.sync import layout
from w3async.recipes import recipe_from_dict
from w3async.sync.table import list_segments
from w3async.runtime.procs import alive
from w3async.runtime.supervisor import RunError, Supervisor
from w3async.compose import supervisor

from tests.conftest import REPO


def events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def lost_starts(run_dir: Path, slot: int | None = None, most: int = 1) -> list[dict]:
    """The game_exit events of starts lost before their game ran: no row posted, an exit
    within a second of the start, with a code that no part of w3async gives (not 0, not
    a W3S_EXIT_*: a launcher, Wine or bubblewrap that gave up before the game's first
    instruction). The supervisor restarts such a start like any failed one. Wine starts
    did this a few times in 10,000 (its loader's randomized heap on the page Wine maps at
    0x7ffe0000, now prevented by the fixed layout; a SIGKILL of a start beside another:
    docs/faults.md), so a test about something else allows `most` of them and names them
    if there are more, until runs show them gone."""
    lost = [e for e in events(run_dir) if e["event"] == "game_exit" and (slot is None or e["slot"] == slot)
            and not e["posted"] and e["up_s"] < 1.0 and e["returncode"] not in (0, *layout.EXIT_NAMES)]
    assert len(lost) <= most, lost
    return lost


def but_lost(causes: dict, lost: list[dict]) -> dict:
    """A slot's (or the run's) counts by cause without the lost starts' (lost_starts)."""
    out = dict(causes)
    for e in lost:
        out[e["cause"]] -= 1
    return {k: n for k, n in out.items() if n}


def null_recipe(groups: list[dict], **sections) -> dict:
    d = {"name": "test", "game": "null", "games": groups}
    # Fast restarts, and a budget that lets a test's deliberately short-lived games restart
    # as often as they fail (the budget itself: tests/runtime/test_hostile_games.py).
    d["supervisor"] = {"progress_s": 0, "backoff_s": 0.05, "backoff_max_s": 0.2, "restart_budget": 1000,
                       **sections.pop("supervisor", {})}
    d.update(sections)
    return d


async def run_recipe(data: dict, run_dir: Path) -> tuple[Supervisor, dict]:
    sup = supervisor(recipe_from_dict(data), run_dir)
    stats = await sup.run()
    return sup, stats


def assert_nothing_left(sup: Supervisor, run_dir: Path) -> None:
    pids = [e["pid"] for e in events(run_dir) if e["event"] == "game_start"]
    assert pids and not [p for p in pids if alive(p)], "a game process outlived the run"
    assert sup.leftovers["processes"] == [] and sup.leftovers["wine"] == []
    assert not [s for s in list_segments() if s.startswith(sup.table.name)], "a game's segment is still linked"
    for rt in sup.runtimes.values():
        prefix = getattr(rt, "prefix", None)
        assert prefix is None  # released
    shutdown = [e for e in events(run_dir) if e["event"] == "shutdown"]
    assert len(shutdown) == 1 and shutdown[0]["leftovers"]["processes"] == []


def check_failures(run_dir: Path) -> list[str]:
    """Lines where a null game reports an answer that failed its check."""
    out = []
    for log in (run_dir / "games").glob("slot-*.log"):
        out += [x for x in log.read_text(errors="replace").splitlines() if "answer check failed" in x]
    return out


async def test_native_null_games_answered_and_checked(tmp_path, null_native):
    data = null_recipe([{"binary": str(null_native), "count": 4, "lanes": 2}], stop={"steps": 20000})
    sup, stats = await run_recipe(data, tmp_path / "run")
    assert stats["agent_steps"] >= 20000
    assert stats["rows_per_round"] > 1.0
    assert check_failures(tmp_path / "run") == []
    summaries = [x for log in (tmp_path / "run" / "games").glob("slot-*.log")
                 for x in log.read_text().splitlines() if x.startswith("null:")]
    assert len(summaries) == 4 and all(", 0 failures," in x and "exit 0" in x for x in summaries)
    assert stats["restarts"] == {}
    assert_nothing_left(sup, tmp_path / "run")


@pytest.mark.wine
async def test_eight_native_and_two_wine_games(tmp_path, null_native, null_exe):
    """The end-to-end test: 8 native and 2 Wine null games for thousands of
    steps with zero answer-check failures, then nothing of the run is left."""
    data = null_recipe(
        [{"binary": str(null_native), "count": 8, "lanes": 1},
         {"binary": str(null_exe), "runtime": "wine", "count": 2, "lanes": 1}],
        supervisor={"start_timeout_s": 120}, stop={"seconds": 12},
    )
    sup, stats = await run_recipe(data, tmp_path / "run")
    run = tmp_path / "run"
    assert check_failures(run) == []
    summaries = {log.name: [x for x in log.read_text().splitlines() if x.startswith("null:")]
                 for log in (run / "games").glob("slot-*.log")}
    assert len(summaries) == 10
    for name, lines in summaries.items():
        assert len(lines) == 1 and ", 0 failures," in lines[0], (name, lines)
        steps = int(lines[0].split()[1])
        assert steps >= 2000, (name, lines)  # thousands of steps each, Wine games included
    assert stats["restarts"] == {}
    prefix = [e for e in events(run) if e["event"] == "game_start" and e["runtime"] == "wine"]
    assert len(prefix) == 2
    assert_nothing_left(sup, run)
    wine_prefixes = json.loads((run / "run.lock").read_text() or "{}")  # released: emptied
    assert wine_prefixes == {}


async def test_crash_exit_and_recycle_restart_with_causes(tmp_path, null_native):
    data = null_recipe(
        [{"binary": str(null_native), "count": 1, "env": {"W3N_ROGUE": "crash", "W3N_ROGUE_STEP": "30"}},
         {"binary": str(null_native), "count": 1, "env": {"W3N_ROGUE": "exit", "W3N_ROGUE_STEP": "30"}},
         {"binary": str(null_native), "count": 1, "env": {"W3N_EPISODES": "2", "W3N_EPISODE_STEPS": "20"}},
         {"binary": str(null_native), "count": 1}],
        stop={"seconds": 4},
    )
    sup, stats = await run_recipe(data, tmp_path / "run")
    causes = {i: g["causes"] for i, g in stats["games"].items()}
    assert causes[0].get("crash", 0) >= 2 and set(causes[0]) == {"crash"}
    assert causes[1].get("exit", 0) >= 2 and set(causes[1]) == {"exit"}
    assert causes[2].get("recycle", 0) >= 2 and set(causes[2]) == {"recycle"}
    assert causes[3] == {}
    exits = [e for e in events(tmp_path / "run") if e["event"] == "game_exit" and e["slot"] == 0]
    assert exits[0]["returncode"] == -signal.SIGSEGV
    assert all(g["state"] == "stopped" for g in stats["games"].values())
    assert_nothing_left(sup, tmp_path / "run")


# The supervisor's defaults: a failing start backs off 0.5, 1, 2 ... 10 s; 20 restarts a minute.
DEFAULT_RESTARTS = {"backoff_s": 0.5, "backoff_max_s": 10.0, "restart_budget": 20, "min_uptime_s": 2.0}


async def test_a_game_that_finishes_each_episode_recycles_at_once_uncounted(tmp_path, null_native):
    # host->finish() in an injected game, W3N_EPISODES here: exit 0 after a 5-step episode,
    # each process living a few ms, far under min_uptime_s. Backed off, it made 3 starts in 3 s.
    data = null_recipe([{"binary": str(null_native), "count": 1,
                         "env": {"W3N_EPISODES": "1", "W3N_EPISODE_STEPS": "5"}}],
                       supervisor=DEFAULT_RESTARTS, stop={"seconds": 3})
    sup, stats = await run_recipe(data, tmp_path / "run")
    g = stats["games"][0]
    assert g["recycles"] >= 25, g  # over the restart budget: none was counted in it
    assert g["restarts"] == 0 and set(g["causes"]) == {"recycle"} and g["state"] == "stopped"
    restarts = [e for e in events(tmp_path / "run") if e["event"] == "game_restart"]
    assert restarts and all(e["cause"] == "recycle" and e["delay_s"] == 0 for e in restarts)
    assert not [e for e in events(tmp_path / "run") if e["event"] == "slot_failed"]
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_game_that_exits_0_before_posting_backs_off_and_fails(tmp_path):
    data = null_recipe([{"binary": "/bin/true", "count": 1, "nice": 0}], supervisor=DEFAULT_RESTARTS,
                       stop={"seconds": 20})
    with pytest.raises(RunError) as e:
        await run_recipe(data, tmp_path / "run")
    assert "exited before its first post 3 times in a row, last with code 0" in str(e.value)
    restarts = [e for e in events(tmp_path / "run") if e["event"] == "game_restart"]
    assert [(e["cause"], e["delay_s"], e["recycles"]) for e in restarts] == [("recycle", 0.5, 0), ("recycle", 1.0, 0)]


async def test_hang_is_detected_and_restarted(tmp_path, null_native):
    data = null_recipe(
        [{"binary": str(null_native), "count": 1, "env": {"W3N_ROGUE": "hang", "W3N_ROGUE_STEP": "10"}},
         {"binary": str(null_native), "count": 1}],
        supervisor={"hang_timeout_s": 1.0}, stop={"seconds": 4},
    )
    sup, stats = await run_recipe(data, tmp_path / "run")
    assert stats["games"][0]["causes"].get("hang", 0) >= 1
    kills = [e for e in events(tmp_path / "run") if e["event"] == "game_kill"]
    assert kills and kills[0]["cause"] == "hang" and kills[0]["phase"] == "step"
    assert_nothing_left(sup, tmp_path / "run")


@pytest.mark.parametrize("mode,field", [("nan", "glob"), ("count", "n_ent"), ("type", "ent_type"),
                                        ("mask", "mask"), ("seq", "obs_seq"), ("bytes", "obs_seq")])
async def test_bad_rows_are_logged_by_field_and_restart_the_game(tmp_path, null_native, mode, field):
    data = null_recipe(
        [{"binary": str(null_native), "count": 1, "lanes": 2, "env": {"W3N_ROGUE": mode, "W3N_ROGUE_STEP": "15"}},
         {"binary": str(null_native), "count": 1}],
        stop={"seconds": 2},
    )
    sup, stats = await run_recipe(data, tmp_path / "run")
    bad = [e for e in events(tmp_path / "run") if e["event"] == "bad_row"]
    assert bad, "no bad row was reported"
    first = bad[0]
    assert first["slot"] == 0 and first["field"] in (field, "row_magic") and first["row"] == 0
    assert "lane" in first and "side" in first
    assert stats["games"][0]["causes"].get("bad_row", 0) >= 1
    assert stats["games"][1]["causes"] == {}
    assert stats["agent_steps"] > 1000  # the run went on
    assert_nothing_left(sup, tmp_path / "run")


async def test_game_that_exits_at_once_fails_its_slot_then_the_run(tmp_path):
    data = null_recipe([{"binary": "/bin/false", "count": 2, "nice": 0}], stop={"seconds": 10})
    with pytest.raises(RunError) as e:
        await run_recipe(data, tmp_path / "run")
    msg = str(e.value)
    assert "every game slot failed" in msg and "/bin/false" in msg and "exited before its first post 3 times" in msg
    failed = [x for x in events(tmp_path / "run") if x["event"] == "slot_failed"]
    assert {x["slot"] for x in failed} == {0, 1}


async def test_wrong_layout_version_is_reported_by_name(tmp_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    for f in ("w3s.h", "w3s.c"):
        (shim / f).write_text((REPO / "shim" / f).read_text())
    (shim / "w3s_table.h").write_text(
        (REPO / "shim" / "w3s_table.h").read_text().replace(f"#define W3S_VERSION {layout.VERSION}u", f"#define W3S_VERSION {layout.VERSION + 1}u"))
    exe = tmp_path / "old_game"
    subprocess.run(["gcc", "-O1", "-I", str(shim), "-o", str(exe), str(REPO / "games/null/null_game.c"),
                    str(shim / "w3s.c"), "-lm"], check=True)
    data = null_recipe([{"binary": str(exe), "count": 1}], stop={"seconds": 10})
    with pytest.raises(RunError) as e:
        await run_recipe(data, tmp_path / "run")
    msg = str(e.value)
    assert "attached to rows of another layout" in msg and str(exe) in msg and f"version {layout.VERSION + 1}" in msg


def _cli(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "w3async", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120, **kw)


def test_cli_missing_binary_names_key_and_path(tmp_path):
    rec = tmp_path / "r.toml"
    rec.write_text('name = "x"\n[[games]]\nbinary = "build/native/no_such_game"\n')
    r = _cli(["run", str(rec), "--runs-dir", str(tmp_path / "runs")])
    assert r.returncode == 2
    assert "games[0].binary" in r.stderr and "no_such_game does not exist" in r.stderr and str(rec) in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_unknown_key_and_wrong_type_name_key_and_file(tmp_path):
    rec = tmp_path / "bad.toml"
    rec.write_text('name = "x"\ncolour = 3\n[supervisor]\nhang_timeout_s = "soon"\nround_perod_ms = 4\n'
                   '[[games]]\ncount = "many"\nruntime = "dos"\n')
    r = _cli(["run", str(rec), "--runs-dir", str(tmp_path / "runs")])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    for needle in (str(rec), "unknown key 'colour'", "supervisor.hang_timeout_s = 'soon': expected float",
                   "unknown key 'supervisor.round_perod_ms'", "games[0].count = 'many': expected int",
                   "games[0].runtime = 'dos': must be one of"):
        assert needle in r.stderr, (needle, r.stderr)


def test_cli_bad_override_and_missing_recipe(tmp_path):
    r = _cli(["run", "null", "--set", "stop.seconds=soon", "--runs-dir", str(tmp_path)])
    assert r.returncode == 2 and "stop.seconds = 'soon': expected float" in r.stderr
    r = _cli(["run", str(tmp_path / "nope.toml")])
    assert r.returncode == 2 and "nope.toml" in r.stderr and "no such file" in r.stderr


def test_cli_sigterm_shuts_down_cleanly(tmp_path, null_native):
    runs = tmp_path / "runs"
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", "null", "--run", "sig", "--runs-dir", str(runs),
                          "--set", "stop.seconds=60", "--set", "supervisor.progress_s=0.5"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    ev = runs / "sig" / "events.jsonl"
    while time.time() < deadline:
        if ev.exists() and sum(1 for x in events(runs / "sig") if x["event"] == "game_start") == 8:
            break
        time.sleep(0.1)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "ended:" in err and "Traceback" not in err
    evs = events(runs / "sig")
    pids = [e["pid"] for e in evs if e["event"] == "game_start"]
    assert len(pids) == 8 and not [x for x in pids if alive(x)]
    shm = [e for e in evs if e["event"] == "run_start"][0]["shm"]
    assert not [s for s in list_segments() if s.startswith(shm)]
    end = [e for e in evs if e["event"] == "shutdown"][0]
    assert end["agent_steps"] > 0 and end["leftovers"]["processes"] == []


def test_live_run_folder_is_refused(tmp_path, null_native):
    runs = tmp_path / "runs"
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", "null", "--run", "busy", "--runs-dir", str(runs),
                          "--set", "stop.seconds=30", "--set", "games.count=1"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not (runs / "busy" / "events.jsonl").exists():
            time.sleep(0.1)
        r = _cli(["run", "null", "--run", "busy", "--runs-dir", str(runs)])
        assert r.returncode == 2 and "in use by a live supervisor" in r.stderr  # bad input (__main__) and str(p.pid) in r.stderr
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
    assert p.returncode == 0


@pytest.mark.wine
async def test_wine_crash_exits_without_a_dialog_and_restarts(tmp_path, null_exe):
    data = null_recipe(
        [{"binary": str(null_exe), "runtime": "wine", "count": 1, "env": {"W3N_ROGUE": "crash", "W3N_ROGUE_STEP": "30"}}],
        supervisor={"start_timeout_s": 120}, stop={"seconds": 8},
    )
    sup, stats = await run_recipe(data, tmp_path / "run")
    assert stats["games"][0]["causes"].get("crash", 0) >= 2
    # Wine's exit status keeps the low byte of 0xC0000005 (an exit with 5): the shim's
    # last-chance filter says the exception and exits 72, read as a crash. Every game that
    # posted crashed so. (A start that exits before it posts is restarted too: under load,
    # 1 start in ~37 exited 1 at once with nothing said, the previous start's crash message
    # landing in the log after it: Wine's own exit outlives the one the supervisor waits for.)
    exits = [e for e in events(tmp_path / "run") if e["event"] == "game_exit"]
    posted = [e for e in exits if e["posted"]]
    assert len(posted) >= 2 and all(e["returncode"] == layout.EXIT_CRASH and e["cause"] == "crash" for e in posted), exits
    assert len(exits) - len(posted) <= len(exits) // 4, exits  # start failures stay the exception
    assert "w3s: the game crashed: access violation (0xc0000005)" in posted[0]["stderr"], posted[0]
    assert_nothing_left(sup, tmp_path / "run")


def test_sigkilled_run_is_cleaned_up_by_the_next(tmp_path, null_native):
    """A supervisor killed with SIGKILL leaves its segment and (for a moment) its games;
    the next run on the same folder finds its lock, ends what is left, unlinks the
    segment, and runs."""
    runs = tmp_path / "runs"
    args = ["run", "null", "--run", "k", "--runs-dir", str(runs), "--set", "games.count=3"]
    p = subprocess.Popen([sys.executable, "-m", "w3async", *args, "--set", "stop.seconds=60"], cwd=REPO,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        if (runs / "k" / "events.jsonl").exists() and \
                sum(1 for x in events(runs / "k") if x["event"] == "game_start") == 3:
            break
        time.sleep(0.1)
    time.sleep(0.5)
    shm = [e for e in events(runs / "k") if e["event"] == "run_start"][0]["shm"]
    old = [e["pid"] for e in events(runs / "k") if e["event"] == "game_start"]
    p.kill()
    p.wait()
    assert [s for s in list_segments() if s.startswith(shm + "-")]  # what a killed run leaves
    r = _cli([*args, "--set", "stop.seconds=2"])
    assert r.returncode == 0, r.stderr
    evs = events(runs / "k")
    prev = [e for e in evs if e["event"] == "previous_run"]
    assert len(prev) == 1 and prev[0]["dead_pid"] == p.pid and prev[0]["shm"] == shm
    assert prev[0]["shm_unlinked"] is True
    assert not [s for s in list_segments() if s.startswith(shm)]
    assert not [x for x in old if alive(x)]
    assert [e for e in evs if e["event"] == "shutdown"][-1]["agent_steps"] > 0


@pytest.mark.wine
async def test_wine_hang_is_detected_and_restarted(tmp_path, null_exe):
    data = null_recipe(
        [{"binary": str(null_exe), "runtime": "wine", "count": 1, "env": {"W3N_ROGUE": "hang", "W3N_ROGUE_STEP": "30"}}],
        supervisor={"start_timeout_s": 120, "hang_timeout_s": 1.5}, stop={"seconds": 10},
    )
    sup, stats = await run_recipe(data, tmp_path / "run")
    assert stats["games"][0]["causes"].get("hang", 0) >= 1
    kills = [e for e in events(tmp_path / "run") if e["event"] == "game_kill"]
    assert kills and kills[0]["cause"] == "hang" and kills[0]["phase"] == "step"
    assert_nothing_left(sup, tmp_path / "run")


def test_wine_that_cannot_make_a_prefix_is_a_clear_error(tmp_path, null_native):
    """A Wine loader that is missing, or one that fails to boot a prefix, stops the run
    with one message naming it; nothing is left behind."""
    rec = tmp_path / "w.toml"
    rec.write_text(f'name = "w"\n[runtime]\nwine = "no-such-wine"\ncache_dir = "{tmp_path / "cache"}"\n'
                   f'[[games]]\nbinary = "{REPO / "build/win64/null_game.exe"}"\nruntime = "wine"\n')
    if not (REPO / "build/win64/null_game.exe").exists():
        pytest.skip("no .exe built (mingw missing)")
    r = _cli(["run", str(rec), "--runs-dir", str(tmp_path / "runs"), "--set", "stop.seconds=20"])
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "Wine loader 'no-such-wine' not found" in r.stderr
    # a loader that exists but cannot boot a prefix
    fake = tmp_path / "bin" / "wine"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'wine: cannot boot here' >&2\nexit 3\n")
    fake.chmod(0o755)
    (tmp_path / "bin" / "wineserver").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "wineserver").chmod(0o755)
    rec.write_text(rec.read_text().replace('wine = "no-such-wine"', f'wine = "{fake}"'))
    r = _cli(["run", str(rec), "--runs-dir", str(tmp_path / "runs"), "--set", "stop.seconds=20"])
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "wineboot -i exited 3" in r.stderr and "cannot boot here" in r.stderr


def test_every_runtime_is_a_runtime(tmp_path):
    """The keeper talks to native, Wine and injected games through one protocol only."""
    from w3async.recipes.sections import InjectSection
    from w3async.runtime.gamestart import Runtime
    from w3async.runtime.inject import InjectedRuntime
    from w3async.runtime.native import NativeRuntime
    from w3async.runtime.wine import WineConfig, WineRuntime

    wine = WineRuntime(WineConfig())
    for rt in (NativeRuntime(), wine, InjectedRuntime(wine, InjectSection(adapter="x.dll"), tmp_path)):
        assert isinstance(rt, Runtime), type(rt).__name__
    assert not isinstance(object(), Runtime)
    keeper = (REPO / "w3async" / "runtime" / "keeper.py").read_text()
    assert ".inject" not in keeper and 'name == "native"' not in keeper and "getattr(" not in keeper


def test_no_part_of_a_run_receives_the_supervisor_whole():
    """The Supervisor hands its parts the run's context and the pieces each names
    (runtime/life.py): no call in supervisor.py passes `self`, and no part's constructor
    or shutdown step takes a supervisor-like parameter."""
    import ast
    import inspect

    from w3async.cluster.link import ClusterLink
    from w3async.observe.run_view import SupervisorSource
    from w3async.runtime import shutdown
    from w3async.runtime.answerer import RunControl
    from w3async.runtime.keeper import GameKeeper
    from w3async.runtime.watching import RunWatch

    tree = ast.parse((REPO / "w3async/runtime/supervisor.py").read_text())
    passed = [f"line {n.lineno}" for n in ast.walk(tree) if isinstance(n, ast.Call)
              and any(isinstance(a, ast.Name) and a.id == "self" for a in [*n.args, *(k.value for k in n.keywords)])]
    assert passed == [], f"supervisor.py passes itself at {passed}"
    parts = [GameKeeper.__init__, RunWatch.__init__, RunControl.__init__, ClusterLink.__init__,
             SupervisorSource.__init__, shutdown.register_record, shutdown.register_table, shutdown.register_answerer]
    for fn in parts:
        names = set(inspect.signature(fn).parameters)
        assert not names & {"sup", "host", "supervisor"}, (fn.__qualname__, names)


async def test_a_run_refused_after_its_table_leaves_nothing_and_says_so(tmp_path, null_native):
    """A [cluster] recipe given to a Supervisor without a cluster link is refused after its
    table exists and before any part that starts games: the refusal names the fix, the
    segment is unlinked, and the shutdown record says nothing was left."""
    data = null_recipe([{"binary": str(null_native), "count": 1, "lanes": 1},
                        {"binary": str(null_native), "count": 1, "lanes": 1, "host": "node1"}],
                       cluster={"local_nodes": 1})
    sup = supervisor(recipe_from_dict(data), tmp_path / "run", cluster=None)
    with pytest.raises(RunError, match=r"\[cluster\] section, and this supervisor no cluster link"):
        await sup.run()
    assert not [s for s in list_segments() if s.startswith(sup.table.name)]
    record = [e for e in events(tmp_path / "run") if e["event"] == "shutdown"]
    assert len(record) == 1 and record[0]["leftovers"]["processes"] == [] and record[0]["shutdown_errors"] == []
    assert "cluster link" in record[0]["error"]
    assert not [e for e in events(tmp_path / "run") if e["event"] in ("game_start", "run_start")]


async def test_a_teardown_step_off_the_loop_runs_when_the_executors_are_stopped():
    """At the interpreter's exit concurrent.futures stops every executor: a shutdown step
    meant for one (Wine's clean-up, the accounting's stop) then runs on the loop instead of
    failing with "cannot schedule new futures after shutdown"; an error of its own is
    still kept."""
    import concurrent.futures

    from w3async.runtime.teardown import Teardown

    loop = asyncio.get_running_loop()
    stopped = concurrent.futures.ThreadPoolExecutor(1)
    stopped.shutdown()
    loop.set_default_executor(stopped)
    td = Teardown()
    assert await td.step("clean-up", lambda: 42, off_loop=True) == 42
    assert await td.step("broken", lambda: 1 / 0, off_loop=True) is None
    assert td.errors == ["broken: ZeroDivisionError: division by zero"]


def test_a_game_that_fails_the_same_way_every_start_fails_its_slot_and_the_run(tmp_path):
    """The null game checks its answers, so under the random policy it exits 67 at its
    first one, every start. Its slot fails after max_start_failures starts that ended that
    way before a second post (before: 64 restarts in 45 s, the backoff keeping them under
    the budget, and the run ended with exit 0); every slot failing ends the run with the
    cause, exit 1."""
    runs = tmp_path / "runs"
    r = _cli(["run", "recipes/null.toml", "--runs-dir", str(runs), "--run", "loop", "--set", "supervisor.policy=random",
              "--set", "stop.seconds=60"])
    assert r.returncode == 1, (r.returncode, r.stderr[-2000:])
    assert "every game slot failed" in r.stderr and "ended the same way at its first answer 3 starts" in r.stderr, r.stderr
    ev = events(runs / "loop")
    failed = [e for e in ev if e["event"] == "slot_failed"]
    assert len(failed) == 8 and all("cause exit, code 67" in e["reason"] for e in failed), failed
    assert len([e for e in ev if e["event"] == "game_start"]) == 8 * 3


def test_an_env_whose_games_fail_every_start_raises_the_cause():
    """The same crash loop behind w3async.env: step() raises EnvClosed naming it (before,
    it waited for good)."""
    import numpy as np

    import w3async.env as we
    env = we.make("env-null", sets=["games.count=1", "games.env.W3N_CHECK=1"])
    try:
        env.reset(seed=1)
        with pytest.raises(we.EnvClosed, match="ended the same way at its first answer"):
            for _ in range(10_000):
                env.step(np.full((env.num_envs, layout.N_HEADS), 3, np.int64))
    finally:
        env.close()


async def test_a_game_is_told_its_rows_lanes_and_sides(tmp_path):
    """A game that prints its environment (/usr/bin/env, which never attaches: its slot
    fails) was told its rows and its group's shape: W3S_NROWS = W3S_LANES * W3S_SIDES."""
    data = null_recipe([{"binary": "/usr/bin/env", "count": 1, "lanes": 3, "sides": 2},
                        {"binary": "/usr/bin/env", "count": 1, "lanes": 5, "sides": 1}],
                       supervisor={"max_start_failures": 1}, stop={"seconds": 5})
    with pytest.raises(RunError):
        await run_recipe(data, tmp_path / "run")
    for slot, (row0, lanes, sides) in enumerate([(0, 3, 2), (6, 5, 1)]):
        log = (tmp_path / "run" / "games" / f"slot-{slot}.log").read_text()
        told = dict(x.split("=", 1) for x in log.splitlines() if x.startswith("W3S_"))
        assert (told["W3S_ROW0"], told["W3S_NROWS"], told["W3S_LANES"], told["W3S_SIDES"]) == (
            str(row0), str(lanes * sides), str(lanes), str(sides)), told
