"""Per-process accounting (observe/accounting.py) with real games: a game's CPU-burning
helper and its memory are the game's, as /proc says; a game over its RSS cap is recycled
with cause `memory`; the figures reach /games, /status, /metrics and the events; a Wine
prefix's wineserver and its sync are found."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import pytest

from w3async.observe.accounting import Accounting
from w3async.observe.run_view import RunView
from w3async.observe.status_metrics import metrics_text
from w3async.recipes import recipe_from_dict
from w3async.compose import supervisor

from tests.runtime.test_supervisor import assert_nothing_left, events, null_recipe


def _tree(root: int) -> list[int]:
    """root and its descendants, from /proc (the test's own walk)."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def _vmrss_mb(pids: list[int]) -> float:
    """VmRSS of /proc/<pid>/status, summed (another file than the sampler reads)."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next((int(x.split()[1]) for x in f if x.startswith("VmRSS:")), 0) / 1024
        except OSError:
            pass
    return total


async def _run_with_peek(data: dict, run_dir, at_s: float, peek):
    sup = supervisor(recipe_from_dict(data), run_dir)
    seen = {}

    async def later():
        await asyncio.sleep(at_s)
        seen.update(peek(sup))

    task = asyncio.ensure_future(later())
    stats = await sup.run()
    await task
    return sup, stats, seen


async def test_a_games_burning_helper_and_memory_are_its_own(tmp_path, null_native):
    """Slot 0 forks a helper that spins; slot 1 takes 96 MiB; slot 2 is plain. The helper's
    CPU is slot 0's (one more process than slot 2, most of a core), each game's RSS is
    within 10% of /proc's VmRSS of its processes (1 MiB for the small ones), and the
    figures reach /games, /status, /metrics and the `accounting` events."""
    rogue = {"W3N_ROGUE_STEP": "5", "W3N_CHECK": "0"}
    data = null_recipe([{"binary": str(null_native), "count": 1, "env": dict(rogue, W3N_ROGUE="burn")},
                        {"binary": str(null_native), "count": 1, "env": dict(rogue, W3N_ROGUE="hog", W3N_HOG_MB="96")},
                        {"binary": str(null_native), "count": 1, "env": {"W3N_CHECK": "0"}}],
                       supervisor={"accounting_s": 0.5, "accounting_event_s": 1, "policy": "random",
                                   "round_period_ms": 5},  # the loop takes no core from the helper
                       stop={"seconds": 6})

    def peek(sup):
        sample = sup.watch.sample()
        trees = {s.index: _tree(s.proc.pid) for s in sup.slots}
        view = RunView(sup.run_dir, sup.watch.status_source())
        view.sample()
        view.refresh()
        st = view.status()
        return dict(sample=sample, rss={i: _vmrss_mb(t) for i, t in trees.items()}, trees=trees,
                    games=view.games(), status=st, metrics=metrics_text(st))

    sup, stats, seen = await _run_with_peek(data, tmp_path / "run", 4.5, peek)
    games = seen["sample"]["games"]
    assert games[0]["procs"] == games[2]["procs"] + 1 == len(seen["trees"][0])  # the helper counted with its game
    assert games[0]["cpu"] > 0.3 and games[0]["cpu"] > 3 * games[2]["cpu"], games
    # CPU per step: the helper's spin is slot 0's cost per step too; the kind's is over all
    # the games' steps of the sample, so it lies between the games' own.
    per = [games[i]["ms_per_step"] for i in range(3)]
    assert None not in per and per[0] > 3 * per[2], games
    kind = seen["sample"]["kinds"]["games"]["ms_per_step"]
    assert kind is not None and min(per) <= kind * 1.05 and kind <= max(per) * 1.05, (kind, per)
    for i in range(3):  # the sample and the test's read are up to one interval apart: a few pages move
        assert abs(games[i]["rss_mb"] - seen["rss"][i]) <= max(0.1 * seen["rss"][i], 1.0), (i, games[i], seen["rss"])
    assert abs(games[1]["rss_mb"] - seen["rss"][1]) <= 0.1 * seen["rss"][1]  # the 96 MiB game: within 10%
    assert games[1]["rss_mb"] >= 96
    by_slot = {g["slot"]: g for g in seen["games"]}
    assert by_slot[1]["rss_mb"] >= 96 and by_slot[0]["cpu"] > 0.3 and by_slot[0]["cpu_ms_per_step"] > 0
    acct = seen["status"]["accounting"]
    assert acct["kinds"]["games"]["procs"] == sum(len(t) for t in seen["trees"].values())
    assert acct["kinds"]["supervisor"]["rss_mb"] > 10 and "loop" in acct["threads"]
    assert "executor" in acct["threads"] and not [r for r in acct["threads"] if r.startswith("asyncio_")]
    m = seen["metrics"]
    assert 'w3async_game_cpu_cores{slot="0"}' in m and 'w3async_memory_rss_bytes{kind="games"}' in m
    assert 'w3async_thread_cpu_cores{role="loop"}' in m and 'w3async_cpu_cores{kind="supervisor",mode="user"}' in m
    recs = [e for e in events(tmp_path / "run") if e["event"] == "accounting"]
    assert len(recs) >= 2 and recs[-1]["games"]["1"]["rss_mb"] >= 96
    assert stats["restarts"] == {}  # no cap: nothing recycled
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_game_over_its_rss_cap_is_recycled_with_cause_memory(tmp_path, null_native):
    """A game that takes 128 MiB in a group capped at 64 is recycled, cause `memory`,
    counted like any restart, whether the sampler or the kernel (its cgroup) ends it; a
    game of another group under no cap is left alone."""
    data = null_recipe([{"binary": str(null_native), "count": 1, "max_rss_mb": 64,
                         "env": {"W3N_ROGUE": "hog", "W3N_HOG_MB": "128", "W3N_ROGUE_STEP": "5"}},
                        {"binary": str(null_native), "count": 1, "env": {"W3N_ROGUE": "hog", "W3N_HOG_MB": "128",
                                                                        "W3N_ROGUE_STEP": "5"}}],
                       supervisor={"accounting_s": 0.3}, stop={"seconds": 5})
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")
    stats = await sup.run()
    assert stats["games"][0]["causes"].get("memory", 0) >= 2 and set(stats["games"][0]["causes"]) == {"memory"}
    assert stats["games"][0]["restarts"] >= 2  # counted in the budget
    assert stats["games"][1]["causes"] == {}
    # Over the cap, the sampler kills it (game_kill with its RSS) or, where the game has a
    # cgroup (runtime/limits.py), the kernel ends it first (game_exit, cause memory; or
    # game_kill naming the cgroup, when the watch reads the kernel's kill before the exit).
    ev = events(tmp_path / "run")
    kills = [e for e in ev if e["event"] == "game_kill"]
    assert all(e["cause"] == "memory" and e["slot"] == 0 for e in kills), kills
    assert all(e["rss_mb"] > 64 == e["max_rss_mb"] for e in kills if "cgroup" not in e), kills
    ended = [e for e in ev if e["event"] == "game_exit" and e["cause"] == "memory"]
    assert len(kills) + len(ended) >= 2 and all(e["slot"] == 0 for e in ended), (kills, ended)
    assert_nothing_left(sup, tmp_path / "run")


@pytest.mark.wine
async def test_a_wine_prefixs_wineserver_and_sync(tmp_path, null_exe):
    """Two Wine games of one prefix: its wineserver (and Wine's services) are kinds of
    their own, not a game's; the prefix's sync is read from the wineserver: Debian's Wine
    8.0 has no esync, fsync or ntsync, so "server"; said once in a `wine_sync` event. The
    server's CPU per step of the games is sampled with the rest."""
    data = null_recipe([{"binary": str(null_exe), "runtime": "wine", "count": 2}],
                       supervisor={"accounting_s": 0.5, "start_timeout_s": 120}, stop={"seconds": 6})

    def peek(sup):
        sample = sup.watch.sample()
        with open(f"/proc/{sample['prefixes'][0]['wineserver_pid']}/comm") as f:  # while it runs
            comm = f.read()
        return dict(sample=sample, trees={s.index: _tree(s.proc.pid) for s in sup.slots}, comm=comm,
                    prefixes=[p for rt in sup.runtimes.values() for p in rt.prefixes()])

    sup, stats, seen = await _run_with_peek(data, tmp_path / "run", 5.0, peek)
    sample = seen["sample"]
    [pf] = sample["prefixes"]
    assert pf["prefix"] == seen["prefixes"][0] and pf["sync"] == "server"
    assert seen["comm"].startswith("wineserver")
    assert sample["kinds"]["wineserver"]["procs"] == 1 and sample["kinds"]["wineserver"]["rss_mb"] > 1
    # What the server and Wine's services cost a step of the games they serve (this game's
    # steps go through shared memory and doorbells, not the server: near 0 here).
    assert sample["kinds"]["wineserver"]["ms_per_step"] is not None, sample["kinds"]
    assert sample["kinds"]["wine-services"]["ms_per_step"] is not None, sample["kinds"]
    games_pids = {p for t in seen["trees"].values() for p in t}
    assert pf["wineserver_pid"] not in games_pids
    said = [e for e in events(tmp_path / "run") if e["event"] == "wine_sync"]
    assert len(said) == 1 and said[0]["sync"] == "server"
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_killed_reader_is_replaced_and_the_run_goes_on(tmp_path, null_native):
    """The /proc reader SIGKILLed mid-run: the next sample starts a new one, the figures
    come back, the games never notice; at the end no reader is left."""
    data = null_recipe([{"binary": str(null_native), "count": 2}], supervisor={"accounting_s": 0.3},
                       stop={"seconds": 5})
    seen = {}
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")

    async def later():
        await asyncio.sleep(2.0)
        seen["first"] = sup.watch.accounting._reader.pid
        os.kill(seen["first"], signal.SIGKILL)
        seen["killed_at"] = time.time()
        await asyncio.sleep(2.0)
        acct = sup.watch.accounting
        seen.update(second=acct._reader.pid, sample=acct.latest())

    task = asyncio.ensure_future(later())
    stats = await sup.run()
    await task
    assert seen["second"] != seen["first"] and seen["sample"]["t"] > seen["killed_at"]
    assert seen["sample"]["games"][0]["procs"] >= 1 and stats["restarts"] == {}
    assert not os.path.exists(f"/proc/{seen['first']}") and not os.path.exists(f"/proc/{seen['second']}")  # reaped
    assert_nothing_left(sup, tmp_path / "run")


def test_the_readers_are_this_package_whatever_the_working_folder(tmp_path, monkeypatch):
    """The accounting's /proc reader and the video maker are children of this w3async,
    run from a working folder that holds a w3async/ of its own (another checkout): the
    reader samples, the video child's --help is this package's."""
    from w3async.pychild import python_child

    decoy = tmp_path / "w3async"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy w3async was imported')\n")
    monkeypatch.chdir(tmp_path)
    acct = Accounting(lambda: [], interval_s=0.1)
    try:
        acct.sample()  # the first sample only sets the clocks
        second = acct.sample()
    finally:
        acct.stop()
    assert second is not None and second["kinds"]["supervisor"]["procs"] >= 1, second  # this process, its reader
    out = subprocess.run(python_child("w3async.observe.video", "--help"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "REPLAY" in out.stdout.upper(), out.stderr[-2000:]
