"""Chaos: a small self-play run kept alive through faults (issue: supervision under faults).

It starts `python -m w3async run` on a small duel self-play recipe (with the learner),
and while it runs: SIGKILLs a random game every --kill-every seconds, SIGSTOPs one game
once (a hang), and has a rogue game in the recipe that posts NaN features every so
often; at the end it sends SIGTERM. Then it prints and asserts:

- the run kept stepping: after each fault, steps/s is back to half the run's median
  within --recover seconds (from inference.jsonl's per-second lines);
- every fault is in events.jsonl with its cause (crash for a SIGKILL, hang for the
  SIGSTOP, bad_row for the rogue game) and was followed by a restart;
- nothing corrupt reached a network or the learner (no nonfinite_output or
  nonfinite_batch event, every update's losses finite) and the cut episodes were
  dropped (cut_steps > 0), none trained on as finished;
- the run ended by SIGTERM with exit 0, and no child process, no Wine process of the
  run and no shared-memory segment of the run is left.

    python bench/chaos.py --seconds 90          # prints the figures for docs/
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from w3async.runtime.procs import alive  # noqa: E402

RECIPE = """
name = "chaos"
game = "duel"

[[games]]
binary = "{duel}"
count = {count}
lanes = 2
sides = 2
nice = 5
env = {{ W3D_SIDES = "agent,agent", W3D_REWARD = "shaped", W3D_TIME_LIMIT = "4000" }}

[[games]]                      # the rogue: a null game that posts NaN features at its 150th step
binary = "{null}"
count = 1
lanes = 1
nice = 5
env = {{ W3N_CHECK = "0", W3N_TYPES = "6", W3N_ROGUE = "nan", W3N_ROGUE_STEP = "150" }}

[supervisor]
policy = "network"
round_period_ms = 2
hang_timeout_s = 3
backoff_s = 0.2
backoff_max_s = 2
progress_s = 0

[network]
d_model = 32
n_heads = 2
n_layers = 1

[learner]
update_epochs = 1
minibatch_seqs = 8

[trajectories]
seq_len = 8
seqs_per_batch = 16

[checkpoint]
every_updates = 5
"""


def read(path: Path, event: str | None = None) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            x = json.loads(line)
        except ValueError:
            continue  # a line being written
        if event is None or x.get("event") == event:
            out.append(x)
    return out


def ts(x: dict) -> float:
    from datetime import datetime  # noqa: PLC0415

    return datetime.fromisoformat(x["ts"].replace("Z", "+00:00")).timestamp()


def live_games(run: Path) -> dict[int, int]:
    """slot -> pid of each game's latest start that has not exited (as the events say)."""
    pids = {}
    for e in read(run / "events.jsonl"):
        if e["event"] == "game_start":
            pids[e["slot"]] = e["pid"]
        elif e["event"] in ("game_exit", "game_kill") and pids.get(e["slot"]) == e.get("pid"):
            pids.pop(e["slot"], None)
    return pids


def chaos(seconds: float, kill_every: float, count: int, recover_s: float, seed: int, keep: bool) -> dict:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="w3a-chaos-"))
    recipe = work / "chaos.toml"
    recipe.write_text(RECIPE.format(duel=REPO / "build/native/duel", null=REPO / "build/native/null_game", count=count))
    run = work / "runs" / "chaos"
    log = open(work / "supervisor.log", "wb")
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(work / "runs"),
                          "--run", "chaos"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    faults: list[dict] = []
    t_start = time.time()
    try:
        while time.time() - t_start < 60 and len(live_games(run)) < count + 1:
            time.sleep(0.2)
        time.sleep(5.0)  # warm up: the first rounds and updates
        t_end = time.time() + seconds
        next_kill = time.time() + kill_every
        stopped = False
        while time.time() < t_end:
            time.sleep(0.1)
            if p.poll() is not None:
                raise AssertionError(f"the supervisor exited during the chaos (code {p.returncode})")
            now = time.time()
            stopped_pids = {f["pid"] for f in faults if f["kind"] == "sigstop"}
            games = {s: pid for s, pid in live_games(run).items()
                     if s < count and pid not in stopped_pids}  # duel slots, the stopped one left to the hang watch
            if not stopped and now > t_start + 5 + seconds / 3 and games:
                slot, pid = rng.choice(sorted(games.items()))
                os.kill(pid, signal.SIGSTOP)
                faults.append(dict(kind="sigstop", slot=slot, pid=pid, t=now))
                stopped = True
            elif now >= next_kill and games and now < t_end - (recover_s + 2.0):  # a quiet tail: every fault gets its recovery window
                slot, pid = rng.choice(sorted(games.items()))
                try:
                    os.kill(pid, signal.SIGKILL)
                    faults.append(dict(kind="sigkill", slot=slot, pid=pid, t=now))
                except ProcessLookupError:
                    pass
                next_kill = now + kill_every
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
    return dict(rc=rc, run=run, work=work, faults=faults, seconds=seconds, recover_s=recover_s, keep=keep)


def verify(r: dict) -> dict:
    """Check everything the module docstring promises; returns the figures."""
    run = r["run"]
    ev = read(run / "events.jsonl")
    problems = []
    if r["rc"] != 0:
        problems.append(f"the supervisor exited {r['rc']} after SIGTERM (see {r['work']}/supervisor.log)")
    # every fault logged with its cause and restarted
    for f in r["faults"]:
        if f["kind"] == "sigkill":
            hit = [e for e in ev if e["event"] == "game_exit" and e.get("pid") == f["pid"]]
            if not hit or hit[0]["cause"] != "crash" or hit[0]["returncode"] != -signal.SIGKILL:
                problems.append(f"SIGKILL of slot {f['slot']} (pid {f['pid']}) not logged as a crash: {hit}")
        else:
            hit = [e for e in ev if e["event"] == "game_kill" and e.get("pid") == f["pid"]]
            if not hit or hit[0]["cause"] != "hang":
                problems.append(f"SIGSTOP of slot {f['slot']} (pid {f['pid']}) not logged as a hang: {hit}")
        f["logged_t"] = ts(hit[0]) if hit else math.nan
        later = [e for e in ev if e["event"] == "game_start" and e["slot"] == f["slot"] and ts(e) >= f["t"]]
        if not later:
            problems.append(f"slot {f['slot']} was not restarted after its {f['kind']}")
    bad = [e for e in ev if e["event"] == "bad_row"]
    if not bad:
        problems.append("the rogue game's NaN rows were never reported")
    restarts = [e for e in ev if e["event"] == "game_restart"]
    causes: dict[str, int] = {}
    for e in restarts:
        causes[e["cause"]] = causes.get(e["cause"], 0) + 1
    # nothing corrupt reached a network or the learner
    for name in ("nonfinite_output", "nonfinite_batch", "learner_failed"):
        if any(e["event"] == name for e in ev):
            problems.append(f"{name} in events.jsonl")
    ups = read(run / "learner.jsonl", "update")
    if not ups:
        problems.append("the learner made no update")
    elif not all(math.isfinite(u["policy_loss"]) and math.isfinite(u["value_loss"]) for u in ups):
        problems.append("a non-finite loss in learner.jsonl")
    cut = ups[-1]["cut_steps"] if ups else 0
    if ups and cut <= 0:
        problems.append("no steps were cut although games were killed")
    # kept stepping: per-second rows after each fault
    secs = [(ts(x), x["rows"]) for x in read(run / "inference.jsonl", "rounds")]
    median = statistics.median(x[1] for x in secs) if secs else 0
    recovery = []
    for f in r["faults"]:
        after = [(t, n) for t, n in secs if t > f["t"] + 0.5]
        back = next((t for t, n in after if n >= 0.5 * median), None)
        rec = (back - f["t"]) if back is not None else math.inf
        recovery.append(rec)
        if rec > r["recover_s"] + (3.0 if f["kind"] == "sigstop" else 0.0):  # a hang is found after hang_timeout_s
            problems.append(f"steps/s not back within {r['recover_s']} s after the {f['kind']} at slot {f['slot']} ({rec:.1f} s)")
    # nothing left
    shutdown = [e for e in ev if e["event"] == "shutdown"]
    if not shutdown:
        problems.append("no shutdown event")
    else:
        left = shutdown[-1]["leftovers"]
        if left["processes"] or left["wine"]:
            problems.append(f"left after shutdown: {left}")
    pids = {e["pid"] for e in ev if e["event"] == "game_start"}
    still = [x for x in pids if alive(x)]
    for f in r["faults"]:  # the stopped one was killed by the supervisor
        if f["kind"] == "sigstop" and alive(f["pid"]):
            still.append(f["pid"])
    if still:
        problems.append(f"game processes still alive: {still}")
    shm = [e for e in ev if e["event"] == "run_start"][0]["shm"]
    if os.path.exists("/dev/shm/" + shm.lstrip("/")):
        problems.append(f"segment {shm} still in /dev/shm")
    steps = shutdown[-1]["agent_steps"] if shutdown else 0
    lost = sum(1 for e in ev if e["event"] in ("game_exit", "game_kill"))
    fig = dict(faults=len(r["faults"]) + 1, sigkills=sum(f["kind"] == "sigkill" for f in r["faults"]),
               sigstops=sum(f["kind"] == "sigstop" for f in r["faults"]), bad_rows=len(bad), restarts=len(restarts),
               restart_causes=causes, agent_steps=steps, updates=len(ups), cut_steps=cut,
               steps_s_median=median, recovery_s_max=max(recovery) if recovery else 0.0,
               recovery_s_median=statistics.median(recovery) if recovery else 0.0, games_ended=lost,
               problems=problems)
    return fig


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--kill-every", type=float, default=4.0)
    ap.add_argument("--games", type=int, default=4)
    ap.add_argument("--recover", type=float, default=5.0, help="seconds steps/s has to recover after a fault")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the run folder")
    a = ap.parse_args()
    r = chaos(a.seconds, a.kill_every, a.games, a.recover, a.seed, a.keep)
    fig = verify(r)
    print(f"chaos: {a.seconds:.0f} s, {a.games} duel self-play games + 1 rogue null game, run folder {r['run']}")
    for k, v in fig.items():
        if k != "problems":
            print(f"  {k:<18} {v}")
    if fig["problems"]:
        print("FAILED:")
        for x in fig["problems"]:
            print("  -", x)
        return 1
    print("all checks passed")
    if not a.keep:
        import shutil  # noqa: PLC0415

        shutil.rmtree(r["work"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
