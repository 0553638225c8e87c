"""SIGUSR1 on a running supervisor (a real `w3async run` process, learning on the null
game): every thread's stack, by name, to runs/<run>/threads.txt and stderr, and the run
goes on, through a burst of 400 signals too (a dump taken from the signal handler itself
once ended a run by SIGSEGV after 74); and the run's recipe.json and first event carry the package's version and git
commit."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from w3async import __version__
from w3async.runtime.stackdump import DUMP_FILE

from tests.conftest import REPO
from tests.runtime.test_supervisor import events
from tests.learn.test_training import learn_toml

THREADS = ("MainThread", "w3s-learner", "w3s-infer_0", "w3s-tensorboard", "w3async-status")


def test_sigusr1_dumps_every_thread_by_name(tmp_path, null_native):
    recipe = tmp_path / "learn.toml"
    recipe.write_text(learn_toml() + "[stop]\nseconds = 120\n")
    run = tmp_path / "runs" / "d"
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(run.parent),
                          "--run", "d"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and b'"update"' not in _read(run / "learner.jsonl"):
            time.sleep(0.3)
        assert b'"update"' in _read(run / "learner.jsonl"), "no update in 90 s"
        p.send_signal(signal.SIGUSR1)
        while time.time() < deadline and _read(run / DUMP_FILE).count(b'"w3s-learner"') < 1:
            time.sleep(0.2)
        p.send_signal(signal.SIGUSR1)  # a second dump: the handler stays
        while time.time() < deadline and _read(run / DUMP_FILE).count(b'"w3s-learner"') < 2:
            time.sleep(0.2)
        assert _read(run / DUMP_FILE).count(b"--- threads of pid") == 2
        for _ in range(400):  # signals close together (the kernel may merge some)
            p.send_signal(signal.SIGUSR1)
            time.sleep(0.01)
        assert p.poll() is None  # the run goes on
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    dump = (run / DUMP_FILE).read_text()
    for name in THREADS:
        assert f'"{name}"' in dump, (name, dump[:3000])
    assert dump.count("--- threads of pid") > 2  # the burst's dumps too
    assert '"w3s-learner"' in err and "learner_thread.py" in dump  # stderr, and the stacks themselves
    made = json.loads((run / "recipe.json").read_text())["w3async"]
    start = events(run)[0]
    assert start["event"] == "run_start", start  # the run's first event
    assert made["version"] == start["version"] == __version__
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    expected = commit.stdout.strip() if commit.returncode == 0 else "unknown"
    assert made["commit"] == start["commit"] == expected
    off = [e for e in events(run) if e["event"] == "video_off"]  # the null game has no replay viewer
    assert len(off) == 1 and off[0]["game"] == "null"


def _read(path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
