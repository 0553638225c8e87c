"""The fault barrier and the shutdown: a fault in a round or in a callback of the
loop is recorded with its cause and ends the run cleanly; a full disk does not stop the
rounds or the restarts; a second signal during the shutdown still finishes the clean-up;
a signal during the spawns of many games stops them."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from w3async.runtime.procs import alive, mentioning
from w3async.recipes import recipe_from_dict
from w3async.sync.table import list_segments
from w3async.runtime.supervisor import RunError
from w3async.compose import supervisor

from tests.conftest import REPO, SHM_PREFIX
from tests.runtime.test_supervisor import assert_nothing_left, events, null_recipe


async def test_a_fault_in_a_round_ends_the_run_cleanly(tmp_path, null_native):
    calls = []

    def policy(batch):  # a user's policy with a bug that shows on its 50th round
        calls.append(batch.n)
        if len(calls) == 50:
            raise ZeroDivisionError("the policy's bug")
        from w3async.sync.layout import check_answer  # noqa: PLC0415

        n = batch.n
        return check_answer(batch.obs_seq[:n], batch.lane[:n], batch.side[:n]), [0] * n

    data = null_recipe([{"binary": str(null_native), "count": 2}], stop={"seconds": 60})
    sup = supervisor(recipe_from_dict(data), tmp_path / "run", policy=policy)
    with pytest.raises(RunError, match="internal fault in round: ZeroDivisionError: the policy's bug"):
        await sup.run()
    faults = [e for e in events(tmp_path / "run") if e["event"] == "fault"]
    assert len(faults) == 1 and faults[0]["where"] == "round" and "ZeroDivisionError" in faults[0]["traceback"]
    shutdown = [e for e in events(tmp_path / "run") if e["event"] == "shutdown"]
    assert shutdown[0]["faults"] == 1 and "the policy's bug" in shutdown[0]["error"]
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_fault_in_a_foreign_callback_is_caught_by_the_loop_barrier(tmp_path, null_native):
    data = null_recipe([{"binary": str(null_native), "count": 1}], stop={"seconds": 60})
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")
    run = asyncio.create_task(sup.run())
    while sup.agent_steps < 1000:
        await asyncio.sleep(0.05)

    def broken():  # e.g. a library's done-callback
        raise KeyError("a library's callback")

    asyncio.get_running_loop().call_soon(broken)
    with pytest.raises(RunError, match="KeyError"):
        await asyncio.wait_for(run, 60)
    assert [e for e in events(tmp_path / "run") if e["event"] == "fault"]
    assert_nothing_left(sup, tmp_path / "run")


def _cli(args: list[str], limit_fsize: int | None = None) -> subprocess.Popen:
    def pre():
        if limit_fsize:  # a disk that fills: writes past this size fail with EFBIG
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_fsize, limit_fsize))

    return subprocess.Popen([sys.executable, "-m", "w3async", "run", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=pre)


def _named(run: Path, event: str) -> list[dict]:
    """The run's events of one name so far ([] before the log exists)."""
    return [e for e in events(run) if e["event"] == event] if (run / "events.jsonl").exists() else []


def _mine() -> list[str]:
    return [s for s in list_segments(SHM_PREFIX)]


def test_a_full_disk_during_a_run_keeps_the_rounds_and_the_restarts(tmp_path, null_native):
    before = set(_mine())
    # The limit holds a game's segment (a header page and two rows), not the events of
    # every restart in the run.
    p = _cli(["null", "--runs-dir", str(tmp_path), "--run", "full", "--set", "stop.seconds=10",
              "--set", "games.count=2", "--set", "games.lanes=1", "--set", "games.env.W3N_ROGUE=crash",
              "--set", "games.env.W3N_ROGUE_STEP=500", "--set", "supervisor.restart_budget=10000",
              "--set", "supervisor.max_start_failures=100000",
              "--set", "supervisor.backoff_s=0.02", "--set", "supervisor.backoff_max_s=0.05",
              "--set", "supervisor.progress_s=0"], limit_fsize=32 * 1024)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert "Traceback" not in err and "cannot write" in err and "events.jsonl" in err
    # The games kept crashing and being restarted after the log could take no more.
    logged = sum(1 for e in events(tmp_path / "full") if e["event"] == "game_restart")
    final = err.strip().splitlines()[-1]
    restarts = int(final.rsplit("|", 1)[1].split()[0])
    assert restarts > logged + 2, final
    assert "0 failed" in final
    assert set(_mine()) <= before


def test_a_second_signal_during_the_shutdown_still_cleans_up(tmp_path, null_native):
    """Games that ignore the stop request make the shutdown wait stop_timeout_s; a second
    signal hurries it (no wait), and the clean-up and the shutdown record still happen."""
    before = set(_mine())
    p = _cli(["null", "--runs-dir", str(tmp_path), "--run", "twice", "--set", "stop.seconds=0",
              "--set", "games.count=3", "--set", "games.env.W3N_ROGUE=hang", "--set", "games.env.W3N_ROGUE_STEP=50",
              "--set", "supervisor.stop_timeout_s=600", "--set", "supervisor.hang_timeout_s=600",
              "--set", "supervisor.progress_s=0"])
    run = tmp_path / "twice"
    deadline = time.time() + 60
    while time.time() < deadline and not (run / "events.jsonl").exists() or \
            sum(1 for e in events(run) if e["event"] == "game_start") < 3:
        time.sleep(0.1)
    time.sleep(1.0)
    pids = [e["pid"] for e in events(run) if e["event"] == "game_start"]
    p.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert p.poll() is None  # waiting for the games that ignore the stop request
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)  # well before stop_timeout_s
    assert p.returncode == 0 and "Traceback" not in err, err
    assert "during the shutdown" in err
    shutdown = [e for e in events(run) if e["event"] == "shutdown"]
    assert len(shutdown) == 1 and shutdown[0]["leftovers"]["processes"] == []
    assert not [x for x in pids if alive(x)]
    assert set(_mine()) <= before


def test_a_signal_during_the_spawns_of_many_games_stops_them(tmp_path, null_native):
    before = set(_mine())
    n = 120
    p = _cli(["null", "--runs-dir", str(tmp_path), "--run", "many", "--set", f"games.count={n}",
              "--set", "games.lanes=1", "--set", "stop.seconds=0", "--set", "supervisor.progress_s=0"])
    run = tmp_path / "many"
    deadline = time.time() + 60
    while time.time() < deadline and not (run / "events.jsonl").exists() or \
            not [e for e in events(run) if e["event"] == "game_start"]:
        time.sleep(0.01)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    started = [e for e in events(run) if e["event"] == "game_start"]
    assert 1 <= len(started) < n, "every game was spawned before the signal was heard"
    shutdown = [e for e in events(run) if e["event"] == "shutdown"]
    assert len(shutdown) == 1 and shutdown[0]["leftovers"]["processes"] == []
    assert not [e["pid"] for e in started if alive(e["pid"])]
    assert set(_mine()) <= before


async def test_a_restart_without_file_descriptors_is_retried_not_failed(tmp_path, null_native):
    """Out of file descriptors (a client storm, a leak) a restart cannot make its segment,
    doorbells or pidfd: it is retried after the backoff, and the slot runs again once
    descriptors are free; never marked failed for good."""
    data = null_recipe([{"binary": str(null_native), "count": 1, "env": {"W3N_ROGUE": "crash", "W3N_ROGUE_STEP": "300"}},
                        {"binary": str(null_native), "count": 1}],
                       supervisor={"restart_budget": 1000, "min_uptime_s": 0.0}, stop={"seconds": 60})
    sup = supervisor(recipe_from_dict(data), tmp_path / "run")
    run = asyncio.create_task(sup.run())
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        while not _named(tmp_path / "run", "game_restart"):
            await asyncio.sleep(0.05)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")), hard))
        while not _named(tmp_path / "run", "game_start_failed"):
            await asyncio.sleep(0.05)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    failed_at = len(events(tmp_path / "run"))
    while not [e for e in events(tmp_path / "run")[failed_at:] if e["event"] == "game_start" and e["slot"] == 0]:
        await asyncio.sleep(0.05)
    sup.request_stop()
    stats = await asyncio.wait_for(run, 60)
    assert stats["games"][0]["state"] != "failed" and stats["games"][0]["causes"].get("start_error", 0) >= 1
    assert not [e for e in events(tmp_path / "run") if e["event"] in ("slot_failed", "fault")]
    assert_nothing_left(sup, tmp_path / "run")
