"""Chaos: a small self-play run kept alive through faults (supervision under faults).

It starts `python -m w3async run` on a small duel self-play recipe (with the learner),
and while it runs: SIGKILLs a game every --kill-every seconds, SIGSTOPs one game once (a
hang), and has a rogue game in the recipe that posts NaN features every so often; at
the end it sends SIGTERM. With --injected N (the default where Wine and the mingw
builds exist), the recipe has N injected duels too (duel_rt.exe, the unmodified
real-time game, through the launcher with the hook and the duel's adapter; agent vs
ai:easy) and the kills take turns: a random game (native or injected), the launcher
of an injected game (w3inject.exe), the injected game itself (duel_rt.exe). Then it
prints and asserts:

- the run kept stepping: after each fault, steps/s is back to half the run's median
  within --recover seconds (from inference.jsonl's per-second lines);
- every fault is in events.jsonl with its cause (crash for a SIGKILL, hang for the
  SIGSTOP, bad_row for the rogue game; an injected game killed under its launcher: the
  launcher's exit, whatever code Wine hands it) and was followed by a restart, and
  every injected slot was stepping again before the end;
- nothing corrupt reached a network or the learner (no nonfinite_output or
  nonfinite_batch event, every update's losses finite) and the cut episodes were
  dropped (cut_steps > 0), none trained on as finished;
- the run ended by SIGTERM with exit 0, and no child process, no process carrying the
  run's marker, no Wine process of the run's prefix and no shared-memory segment of the
  run is left.

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
import shutil
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from w3async.runtime import procs  # noqa: E402
from w3async.runtime.procs import alive  # noqa: E402

WIN64 = REPO / "build" / "win64"
INJECTED_PARTS = ("duel_rt.exe", "duel_adapter.dll", "w3inject.exe", "w3hook.dll")

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

{injected}
[supervisor]
policy = "network"
round_period_ms = 2
hang_timeout_s = 3
start_timeout_s = 60           # a first Wine start may boot the prefix (~20 s)
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


# The standalone duel as recipes/duel-injected.toml runs it, one game a process.
INJECTED = """
[[games]]                      # the unmodified real-time duel, driven by injection under Wine
binary = "{duel_rt}"
runtime = "wine"
count = {count}
lanes = 1
sides = 1
nice = 5
env = {{ W3D_SIDES = "agent,ai:easy", W3D_REWARD = "shaped" }}

[games.inject]
adapter = "{adapter}"
args = ["--sides", "human,ai:easy", "--seed", "{{seed}}", "--lane", "{{lane}}", "--time-limit", "4000", "--quiet"]
step_point = "Sleep"
step_ms = 1000
draw = false
draw_calls = ["FillRect", "Ellipse", "Rectangle", "BitBlt"]
"""


def injected_problem() -> str | None:
    """Why the injected duel cannot run here (None: it can): Wine and the mingw builds."""
    if not (shutil.which("wine") or shutil.which("wine64")):
        return "wine is missing (apt-get install wine64)"
    missing = [x for x in INJECTED_PARTS if not (WIN64 / x).exists()]
    if missing:
        return (f"{', '.join(missing)} not built in {WIN64} (make build, with mingw-w64: "
                f"apt-get install gcc-mingw-w64-x86-64)")
    return None


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


def run_marker(run: Path) -> str:
    """What every game process of the run carries in its environment: the table's name
    (W3S_SHM for native games, inside W3S_SHM_PATH for Wine's), from run_start."""
    start = read(run / "events.jsonl", "run_start")
    return start[0]["shm"].lstrip("/") if start else ""


def processes_of_slot(marker: str, slot: int, exe: str) -> list[int]:
    """Live processes of this run's slot that run exe. The launcher and its game carry
    the same environment (Windows hands it down; so do the prefix's wineserver and
    services, started by the first game): the run's marker tells this run's from
    another's, W3S_SLOT the slot, the program (argv[0]) which process it is. Only
    argv[0]: the launcher's command line names the game too."""
    out = []
    for pid in procs.mentioning(marker.encode()):
        env = procs.environ(pid).split(b"\0")
        if f"W3S_SLOT={slot}".encode() not in env:
            continue
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if argv0.replace("\\", "/").rsplit("/", 1)[-1].lower() == exe.lower():
            out.append(pid)
    return out


def wine_prefix_of(pid: int) -> str | None:
    """The Wine prefix a process runs in (its WINEPREFIX)."""
    for kv in procs.environ(pid).split(b"\0"):
        if kv.startswith(b"WINEPREFIX="):
            return kv.split(b"=", 1)[1].decode()
    return None


def slot_states(run: Path) -> dict[int, dict]:
    """slot -> its /games entry from the live run's status server ({} when not serving)."""
    try:
        url = (run / "status.url").read_text().strip()
        with urllib.request.urlopen(url + "games", timeout=2) as r:
            return {g["slot"]: g for g in json.load(r)["games"]}
    except (OSError, ValueError, KeyError):
        return {}


# The kills take turns: a random game, then (with injected games) the launcher of an
# injected one, then the injected game itself under its launcher.
KILL_TURNS = ("sigkill", "launcher", "game")


def chaos(seconds: float, kill_every: float, count: int, recover_s: float, seed: int, keep: bool,
          injected: int = 0) -> dict:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="w3a-chaos-"))
    recipe = work / "chaos.toml"
    inj = INJECTED.format(duel_rt=WIN64 / "duel_rt.exe", adapter=WIN64 / "duel_adapter.dll",
                          count=injected) if injected else ""
    recipe.write_text(RECIPE.format(duel=REPO / "build/native/duel", null=REPO / "build/native/null_game", count=count,
                                    injected=inj))
    inj_slots = set(range(count + 1, count + 1 + injected))  # after the duels and the rogue
    run = work / "runs" / "chaos"
    log = open(work / "supervisor.log", "wb")
    p = subprocess.Popen([sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(work / "runs"),
                          "--run", "chaos"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    faults: list[dict] = []
    prefixes: set[str] = set()
    not_stepping: dict[int, dict] = {}
    marker = ""
    t_start = time.time()
    try:
        while time.time() - t_start < 90 and len(live_games(run)) < count + 1 + injected:
            time.sleep(0.2)
        marker = run_marker(run)
        while injected and time.time() - t_start < 90 and \
                sum(g["state"] == "running" for s, g in slot_states(run).items() if s in inj_slots) < injected:
            time.sleep(0.5)  # the injected games' first start may boot a Wine prefix
        for s in inj_slots:
            prefixes |= {x for pid in processes_of_slot(marker, s, "w3inject.exe") if (x := wine_prefix_of(pid))}
        time.sleep(5.0)  # warm up: the first rounds and updates
        t_end = time.time() + seconds
        next_kill = time.time() + kill_every
        turn = 0
        stopped = False
        while time.time() < t_end:
            time.sleep(0.1)
            if p.poll() is not None:
                raise AssertionError(f"the supervisor exited during the chaos (code {p.returncode})")
            now = time.time()
            stopped_pids = {f["pid"] for f in faults if f["kind"] == "sigstop"}
            live = live_games(run)
            games = {s: pid for s, pid in live.items()
                     if s < count and pid not in stopped_pids}  # duel slots, the stopped one left to the hang watch
            if not stopped and now > t_start + 5 + seconds / 3 and games:
                slot, pid = rng.choice(sorted(games.items()))
                os.killpg(pid, signal.SIGSTOP)  # the start's group: in a sandbox, pid is bwrap's, the game its child
                faults.append(dict(kind="sigstop", slot=slot, pid=pid, t=now))
                stopped = True
            elif now >= next_kill and games and now < t_end - (recover_s + 2.0):  # a quiet tail: every fault gets its recovery window
                kind = KILL_TURNS[turn % len(KILL_TURNS)] if injected else "sigkill"
                fault = None
                if kind == "sigkill":  # any game: a native duel, or an injected one's launcher (the slot's process)
                    victims = {**games, **{s: pid for s, pid in live.items() if s in inj_slots}}
                    slot, pid = rng.choice(sorted(victims.items()))
                    fault = dict(kind="sigkill", slot=slot, pid=pid, slot_pid=pid, injected=slot in inj_slots)
                else:  # an injected game that is stepping: its launcher, or the game under it
                    states = slot_states(run)
                    ready = [s for s in sorted(inj_slots) if states.get(s, {}).get("state") == "running"
                             and processes_of_slot(marker, s, "duel_rt.exe") and s in live]
                    if ready:
                        slot = rng.choice(ready)
                        exe = "w3inject.exe" if kind == "launcher" else "duel_rt.exe"
                        pid = processes_of_slot(marker, slot, exe)[0]
                        fault = dict(kind=kind, slot=slot, pid=pid, slot_pid=live[slot], injected=True)
                if fault is not None and procs.kill(fault["pid"], signal.SIGKILL):
                    faults.append({**fault, "t": now})
                    turn += 1
                    next_kill = now + kill_every
        # Before the end: every injected slot is stepping again (restarted and posting).
        states = slot_states(run)
        not_stepping = {s: states.get(s, {}) for s in inj_slots if states.get(s, {}).get("state") != "running"}
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
    return dict(rc=rc, run=run, work=work, faults=faults, seconds=seconds, recover_s=recover_s, keep=keep,
                injected=injected, inj_slots=inj_slots, prefixes=prefixes, marker=marker, not_stepping=not_stepping)


def verify(r: dict) -> dict:
    """Check everything the module docstring promises; returns the figures."""
    run = r["run"]
    ev = read(run / "events.jsonl")
    problems = []
    if r["rc"] != 0:
        problems.append(f"the supervisor exited {r['rc']} after SIGTERM (see {r['work']}/supervisor.log)")
    # every fault logged with its cause and restarted
    injected_exits: dict[str, int] = {}
    for f in r["faults"]:
        if f["kind"] in ("sigkill", "launcher") and f["pid"] == f["slot_pid"]:
            hit = [e for e in ev if e["event"] == "game_exit" and e.get("pid") == f["pid"]]
            if not hit or hit[0]["cause"] != "crash" or hit[0]["returncode"] != -signal.SIGKILL:
                problems.append(f"SIGKILL of slot {f['slot']}'s {f['kind']} (pid {f['pid']}) not logged as a crash: {hit}")
        elif f["kind"] in ("launcher", "game"):  # the slot's process is the launcher: it exits with its game
            # A game SIGKILLed under its launcher: the launcher exits 71 (no clean-exit mark
            # from the hook), or the hang watch finds the game gone behind a launcher that
            # missed it (game_kill); either way a crash, never a recycle.
            hit = [e for e in ev if e["event"] in ("game_exit", "game_kill") and e.get("pid") == f["slot_pid"]]
            if not hit or hit[0]["cause"] != "crash":
                problems.append(f"SIGKILL of slot {f['slot']}'s {f['kind']} (pid {f['pid']}): its launcher "
                                f"(pid {f['slot_pid']}) did not end as a crash: {hit}")
        else:
            hit = [e for e in ev if e["event"] == "game_kill" and e.get("pid") == f["pid"]]
            if not hit or hit[0]["cause"] != "hang":
                problems.append(f"SIGSTOP of slot {f['slot']} (pid {f['pid']}) not logged as a hang: {hit}")
        f["logged_t"] = ts(hit[0]) if hit else math.nan
        if hit and f.get("injected"):
            how = f"{hit[0]['cause']} {hit[0].get('returncode', '(killed by the watch)')}"
            injected_exits[f"{f['kind']}: {how}"] = injected_exits.get(f"{f['kind']}: {how}", 0) + 1
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
    if os.path.exists("/dev/shm/" + shm.lstrip("/")) or [x for x in os.listdir("/dev/shm") if x.startswith(shm.lstrip("/"))]:
        problems.append(f"segment {shm} still in /dev/shm")
    marked = procs.mentioning(shm.lstrip("/").encode())
    if marked:
        problems.append(f"processes carrying the run's marker {shm.lstrip('/')} still alive: {marked}")
    for prefix in r.get("prefixes", ()):
        wine_left = procs.with_env("WINEPREFIX", prefix)
        if wine_left:
            problems.append(f"Wine processes of the run's prefix {prefix} still alive: {wine_left}")
    if r.get("injected"):
        if not r["prefixes"]:
            problems.append("the injected games' Wine prefix was never seen")
        if r["not_stepping"]:
            problems.append(f"injected slots not stepping again before the end: {r['not_stepping']}")
    steps = shutdown[-1]["agent_steps"] if shutdown else 0
    lost = sum(1 for e in ev if e["event"] in ("game_exit", "game_kill"))
    fig = dict(faults=len(r["faults"]) + 1, sigkills=sum(f["kind"] == "sigkill" for f in r["faults"]),
               injected_games=r.get("injected", 0),
               sigkills_injected=sum(f["kind"] == "sigkill" and f.get("injected", False) for f in r["faults"]),
               launcher_kills=sum(f["kind"] == "launcher" for f in r["faults"]),
               game_kills=sum(f["kind"] == "game" for f in r["faults"]), injected_exits=injected_exits,
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
    ap.add_argument("--injected", type=int, default=None,
                    help="injected duels under Wine (default: 2 where Wine and the mingw builds exist, else 0)")
    a = ap.parse_args()
    problem = injected_problem()
    if a.injected is None:
        a.injected = 0 if problem else 2
        if problem:
            print(f"chaos: no injected games: {problem}")
    elif a.injected and problem:
        print(f"chaos: --injected {a.injected}: {problem}", file=sys.stderr)
        return 2
    r = chaos(a.seconds, a.kill_every, a.games, a.recover, a.seed, a.keep, injected=a.injected)
    fig = verify(r)
    print(f"chaos: {a.seconds:.0f} s, {a.games} duel self-play games + 1 rogue null game + {a.injected} injected duels "
          f"(Wine), run folder {r['run']}")
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
        shutil.rmtree(r["work"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
