"""SIGINT and SIGTERM in any order and at any spacing end a CLI run with
its shutdown record, exit 0 and no traceback (found: SIGINT, SIGTERM, SIGINT 30 ms apart
exited 1 with a KeyboardInterrupt in the runner's close, then "Cannot close a running
event loop", in 1 of 5 tries). Each case is a real `python -m w3async run` of native null
games, signalled while it sets up or while its games run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from w3async.sync.table import list_segments

from tests.runtime.test_supervisor import alive, events

REPO = Path(__file__).resolve().parents[2]
INT, TERM = signal.SIGINT, signal.SIGTERM

# (signals, spacing in seconds, when): every spacing, both orders, repeats; "setup" is as
# soon as the run folder's events.jsonl exists (set-up, the status server, the spawns),
# "running" once every game posted, "storm" from then on until the process has exited;
# "start" as soon as the process holds both signals (its first lines, before the imports,
# the checks and the supervisor: the run then sets up and stops at once).
CASES = [
    ((INT, TERM, INT), 0.030, "running"),  # the sequence found
    ((INT, TERM, INT), 0.030, "setup"),
    ((INT, TERM, INT), 0.0, "running"),
    ((TERM, INT, TERM, INT), 0.001, "running"),
    ((TERM, TERM), 0.010, "running"),
    ((INT, INT, INT), 0.010, "setup"),
    ((TERM, INT), 0.100, "running"),
    ((INT, TERM, INT, TERM, INT), 0.100, "setup"),
    ((INT,), 0.0, "setup"),
    ((TERM, INT, INT, TERM), 0.030, "running"),
    ((TERM,), 0.0, "start"),
    ((INT, TERM, INT), 0.030, "start"),
    ((INT,), 0.001, "storm"),  # SIGINT every ms from the games' start to the process's exit
    ((TERM, INT), 0.005, "storm"),  # alternating, every 5 ms, to the exit
]


def _caught(pid: int) -> bool:
    """Does the process have handlers of its own for both SIGINT and SIGTERM?"""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(x for x in status.splitlines() if x.startswith("SigCgt:")).split()[1], 16)
    return all(mask >> (s - 1) & 1 for s in (INT, TERM))


def _wait(run: Path, phase: str, games: int, deadline: float, pid: int) -> None:
    ev = run / "events.jsonl"
    while time.time() < deadline:
        if phase == "start":
            if _caught(pid):
                return
            time.sleep(0.0005)
            continue
        if ev.exists() and (phase == "setup" or sum(1 for e in events(run) if e["event"] == "game_start") >= games):
            return
        time.sleep(0.002)
    raise AssertionError(f"the run did not reach {phase}")


@pytest.mark.parametrize("sigs,spacing,phase", CASES,
                         ids=[f"{'-'.join(signal.Signals(s).name[3:] for s in c[0])}@{int(c[1] * 1000)}ms-{c[2]}"
                              for c in CASES])
def test_signals_in_any_order_end_the_run_cleanly(tmp_path, null_native, sigs, spacing, phase):
    runs, games = tmp_path / "runs", 2
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", "null", "--run", "sig", "--runs-dir", str(runs),
                          "--set", "stop.seconds=60", "--set", f"games.count={games}",
                          "--set", "supervisor.progress_s=0"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(runs / "sig", phase, games, time.time() + 60, p.pid)
        if phase == "storm":  # every moment of the shutdown, the loop's teardown and the exit gets one
            deadline, i = time.time() + 60, 0
            while p.poll() is None and time.time() < deadline:
                p.send_signal(sigs[i % len(sigs)])
                i += 1
                time.sleep(spacing)
        else:
            for i, sig in enumerate(sigs):
                if i and spacing:
                    time.sleep(spacing)
                p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, (p.returncode, err)
    assert "Traceback" not in err and "Error" not in err, err
    assert "ended:" in [x for x in err.strip().splitlines() if "during the shutdown" not in x][-1], err
    evs = events(runs / "sig")
    shutdown = [e for e in evs if e["event"] == "shutdown"]
    assert len(shutdown) == 1 and shutdown[0]["leftovers"]["processes"] == [], shutdown
    assert not [e["pid"] for e in evs if e["event"] == "game_start" and alive(e["pid"])]
    shm = [e for e in evs if e["event"] == "run_start"][0]["shm"]
    assert not [s for s in list_segments() if s.startswith(shm)]


def _child_running(pid: int, needle: str) -> bool:
    """A child of any thread of pid whose command line holds needle."""
    kids = [c for t in Path(f"/proc/{pid}/task").iterdir() for c in (t / "children").read_text().split()]
    for c in kids:
        try:
            if needle in Path(f"/proc/{c}/cmdline").read_text():
                return True
        except OSError:
            pass
    return False


def test_ctrl_c_at_a_terminal_prints_no_traceback(tmp_path, null_native):
    """Ctrl-C at a terminal is SIGINT to the whole foreground process group: the
    accounting's /proc reader (a child process) got it too and printed a
    KeyboardInterrupt traceback (also while still importing). Now it runs in a session of
    its own and ends when the supervisor closes its stdin."""
    import os

    runs = tmp_path / "runs"
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", "null", "--run", "cc", "--runs-dir", str(runs),
                          "--set", "stop.seconds=60", "--set", "games.count=2", "--set", "supervisor.accounting_s=0.2",
                          "--set", "supervisor.progress_s=0"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(runs / "cc", "running", 2, time.time() + 60, p.pid)
        deadline = time.time() + 30  # the reader runs once a sample has been asked for (by the accounting thread)
        while time.time() < deadline and not _child_running(p.pid, "proc_sampler"):
            time.sleep(0.05)
        assert _child_running(p.pid, "proc_sampler"), "the accounting's reader never started"
        os.killpg(p.pid, INT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
