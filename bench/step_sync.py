"""Step synchronisation benchmark (`make bench`): the supervisor against null games.

For each configuration (runtime, processes, lanes x 2 sides) it runs the supervisor in
this process on uvloop, lets the games warm up, then measures a window: agent steps/s
(an agent step is one row answered), the supervisor's CPU per agent step (user+system
of this process), and mean rows per answer round. Each figure is the median of
--repeats runs. The same null games stepped through gymnasium's
AsyncVectorEnv(shared_memory=True) run in the same invocation, side by side: its thin
env drives one null-game process and returns all of that process's rows, with the same
check-mode answers, so both sides do the same work.

    python bench/step_sync.py                 # the table
    python bench/step_sync.py --gather        # C against numpy on the gather/answer work
    python bench/step_sync.py --sandbox       # sandboxed against unsandboxed games, and start times
    python bench/step_sync.py --accounting    # per-process accounting on against off, and Wine's sync
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from w3async.sync import layout  # noqa: E402
from w3async.sync.gather import CGatherer, Doorbell, NumpyGatherer  # noqa: E402
from w3async.recipes import recipe_from_dict  # noqa: E402
from w3async.sync.table import Table, segment_name  # noqa: E402
from w3async.compose import supervisor  # noqa: E402
from w3async.runtime.policies import policy_answerer  # noqa: E402
from w3async.runtime.supervisor import Supervisor  # noqa: E402

NULL = REPO / "build" / "native" / "null_game"
NULL_EXE = REPO / "build" / "win64" / "null_game.exe"


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# ---- the supervisor -----------------------------------------------------------------


async def _measure(sup: Supervisor, warm_s: float, window_s: float) -> dict:
    task = asyncio.create_task(sup.run())
    # Warm up until every game has posted (Wine games take a second or two), then wait.
    t_end = time.monotonic() + 180
    while time.monotonic() < t_end and (not sup.slots or any(not s.posted for s in sup.slots)):
        await asyncio.sleep(0.1)
    await asyncio.sleep(warm_s)
    s0, r0, c0, t0 = sup.agent_steps, sup.rounds, cpu_s(), time.monotonic()
    await asyncio.sleep(window_s)
    s1, r1, c1, t1 = sup.agent_steps, sup.rounds, cpu_s(), time.monotonic()
    acct = sup.watch.accounting
    sample = sup.watch.sample() or {}
    sup.request_stop()
    await task
    steps = s1 - s0
    return dict(steps_s=steps / (t1 - t0), cpu_us=(c1 - c0) / max(steps, 1) * 1e6,
                rows_round=steps / max(r1 - r0, 1), restarts=sum(s.restarts for s in sup.slots),
                sample_ms=acct.sample_ms if acct else 0.0, syncs=[p["sync"] for p in sample.get("prefixes", [])])


def run_supervisor(runtime: str, count: int, lanes: int, warm_s: float, window_s: float, gather: str = "c",
                   round_ms: float = 0.0, sandbox: str = "preferred", measure=_measure, prefix: str = "shared",
                   accounting_s: float = 2.0) -> dict:
    import uvloop  # noqa: PLC0415

    binary = NULL if runtime == "native" else NULL_EXE
    data = {"name": "bench", "game": "null",
            "games": [{"binary": str(binary), "runtime": runtime, "count": count, "lanes": lanes}],
            "supervisor": {"progress_s": 0, "gather": gather, "start_timeout_s": 180, "round_period_ms": round_ms,
                           "sandbox": sandbox, "accounting_s": accounting_s},
            "status": {"enabled": False}, "runtime": {"prefix": prefix}}
    run_dir = Path(tempfile.mkdtemp(prefix="w3a-bench-"))
    try:
        # The check policy answers with no episode book (what a `w3async run` of a fixed
        # policy keeps): this table is the synchronisation's cost alone.
        sup = supervisor(recipe_from_dict(data), run_dir, answerer=lambda c: policy_answerer(c, "check"))
        return uvloop.run(measure(sup, warm_s, window_s))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


async def _start_time(sup: Supervisor, warm_s: float, window_s: float) -> dict:
    """Seconds from a game's spawn to its first post (one game; polled every ms), then
    after warm_s a restart of it (the Wine prefix is up by then), measured the same way."""
    task = asyncio.create_task(sup.run())
    times = []
    for _ in range(2):
        while not sup.slots or sup.slots[0].proc is None or sup.table is None:
            await asyncio.sleep(0.001)
        s = sup.slots[0]
        t0, start = s.started_at, s.starts  # keeper.spawn's time.monotonic() just after Popen
        obs = sup.table.column("obs_seq")
        while int(obs[s.rows].sum()) == 0 or s.starts != start:
            await asyncio.sleep(0.001)
        times.append(time.monotonic() - t0)
        await asyncio.sleep(warm_s)
        sup.keeper.kill(s, "bench", {})  # restarted after backoff_s
        while s.proc is None or s.proc.returncode is not None or s.starts == start:
            await asyncio.sleep(0.001)
    sup.request_stop()
    await task
    return dict(first_s=times[0], restart_s=times[1])


async def _until_posted(sup: Supervisor, warm_s: float, window_s: float) -> dict:
    """Seconds from the run's start to every game's first post (prefixes started included)."""
    t0 = time.monotonic()
    task = asyncio.create_task(sup.run())
    while not sup.slots or sup.table is None or any(
            int(sup.table.column("obs_seq")[s.rows].sum()) == 0 for s in sup.slots):
        await asyncio.sleep(0.005)
    took = time.monotonic() - t0
    sup.request_stop()
    await task
    return dict(posted_s=took)


def bench_prefix(repeats: int, count: int = 2) -> None:
    """Wine games in one prefix against a prefix each: the run's start to every game's first post."""
    print(f"\nWine, {count} games: run start to every first post, s (median of {repeats}; prefixes already booted)")
    for prefix in ("shared", "per-game"):
        rs = [run_supervisor("wine", count, 1, 0, 0, measure=_until_posted, prefix=prefix) for _ in range(repeats)]
        print(f"  prefix = {prefix!r:<11} {statistics.median(r['posted_s'] for r in rs):.2f}", flush=True)


def bench_sandbox(repeats: int, warm_s: float, window_s: float, wine: bool) -> None:
    """Sandboxed against unsandboxed null games in one run (interleaved), and start times."""
    configs = [("native", 8, 4)] + ([("wine", 8, 1)] if wine else [])
    print(f"sandbox: null games, {repeats} runs each (interleaved), median; window {window_s:.0f} s")
    hdr = f"{'runtime':<8} {'games':>5} {'lanes':>5} {'off steps/s':>12} {'sandboxed':>10} {'ratio':>6} {'us/step off':>12} {'sandboxed':>10}"
    print(hdr)
    print("-" * len(hdr))
    for runtime, count, lanes in configs:
        runs = {"off": [], "preferred": []}
        for _ in range(repeats):
            for mode in runs:
                runs[mode].append(run_supervisor(runtime, count, lanes, warm_s, window_s, sandbox=mode))
        off, on = ({k: statistics.median(r[k] for r in runs[m]) for k in ("steps_s", "cpu_us")} for m in runs)
        print(f"{runtime:<8} {count:>5} {lanes:>5} {off['steps_s']:>12,.0f} {on['steps_s']:>10,.0f} "
              f"{off['steps_s'] / on['steps_s']:>5.2f}x {off['cpu_us']:>12.2f} {on['cpu_us']:>10.2f}", flush=True)
    print()
    print("start time, spawn to first post, s (median): first start / a restart")
    for runtime, _, _ in configs:
        row = []
        for mode in ("off", "preferred"):
            rs = [run_supervisor(runtime, 1, 1, 0.5, 0, sandbox=mode, measure=_start_time) for _ in range(repeats)]
            row.append(f"{mode:>9}: {statistics.median(r['first_s'] for r in rs):.3f} / "
                       f"{statistics.median(r['restart_s'] for r in rs):.3f}")
        print(f"{runtime:<8} " + "   ".join(row), flush=True)


def bench_accounting(repeats: int, warm_s: float, window_s: float, wine: bool) -> None:
    """Per-process accounting off, at its default 2 s and at 0.5 s, in one run
    (interleaved); what a sample costs; each Wine prefix's sync as found."""
    configs = [("native", 8, 4)] + ([("wine", 8, 1)] if wine else [])
    modes = (0.0, 2.0, 0.5)
    print(f"accounting: null games, {repeats} runs each (interleaved), median; window {window_s:.0f} s")
    hdr = (f"{'runtime':<8} {'games':>5} {'lanes':>5} {'off steps/s':>12} {'every 2 s':>10} {'ratio':>6} "
           f"{'every 0.5 s':>12} {'ratio':>6} {'sup us/step off/2s/0.5s':>25} {'sample ms':>10} {'sync':>8}")
    print(hdr)
    print("-" * len(hdr))
    for runtime, count, lanes in configs:
        runs = {m: [] for m in modes}
        for _ in range(repeats):
            for m in modes:
                runs[m].append(run_supervisor(runtime, count, lanes, warm_s, window_s, accounting_s=m))
        st = {m: statistics.median(r["steps_s"] for r in runs[m]) for m in modes}
        cpu = "/".join(f"{statistics.median(r['cpu_us'] for r in runs[m]):.2f}" for m in modes)
        sample_ms = statistics.median(r["sample_ms"] for m in modes[1:] for r in runs[m])
        syncs = sorted({x for m in modes for r in runs[m] for x in r["syncs"]}) or ["-"]
        print(f"{runtime:<8} {count:>5} {lanes:>5} {st[0.0]:>12,.0f} {st[2.0]:>10,.0f} {st[0.0] / st[2.0]:>5.3f}x "
              f"{st[0.5]:>12,.0f} {st[0.0] / st[0.5]:>5.3f}x {cpu:>25} {sample_ms:>10.2f} {','.join(syncs):>8}", flush=True)
    print("(off/on ratio: above 1 means accounting costs steps; sup us/step: this process's CPU a step,\n"
          " the sampler thread's included, the reader process's not; a Wine prefix's sync is read from its\n"
          " wineserver: this machine's Wine offers one mode only, so there is no second to compare)")


# ---- gymnasium's AsyncVectorEnv over the same null games ------------------------------

OBS_COLS = 3 + layout.G_GLOB + 32 * layout.F_ENT + 32  # seq, lane, side, glob, 32 entities, their types


class NullGameEnv:
    """A thin gymnasium env: one null-game process of `lanes` x 2 sides; a step answers
    all of its rows and returns all of them."""

    def __init__(self, lanes: int):
        import gymnasium as gym  # noqa: PLC0415

        self.nrows = lanes * 2
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.nrows, OBS_COLS), np.float64)
        self.action_space = gym.spaces.Box(0, 2**15, (self.nrows, layout.N_HEADS), np.int64)
        self.metadata = {}
        self.render_mode = None
        self.spec = None
        self.np_random = None
        self.table = Table(segment_name("gym"), self.nrows)
        self.obs_fd = os.eventfd(0, os.EFD_CLOEXEC)
        self.act_fd = os.eventfd(0, os.EFD_CLOEXEC)
        env = dict(os.environ, W3S_SHM=self.table.segment(0).name, W3S_ROW0="0", W3S_NROWS=str(self.nrows),
                   W3S_OBS_FD=str(self.obs_fd), W3S_ACT_FD=str(self.act_fd), W3S_PARENT_PID=str(os.getpid()))
        self.proc = subprocess.Popen(["nice", "-n", "10", str(NULL)], env=env, pass_fds=(self.obs_fd, self.act_fd),
                                     stderr=subprocess.DEVNULL)
        self.rows = self.table.rows

    def _wait_obs(self) -> np.ndarray:
        r = self.rows
        while not (r["obs_seq"] == r["act_seq"] + 1).all():
            select.select([self.obs_fd], [], [], 5.0)
            os.read(self.obs_fd, 8)
        obs = np.empty((self.nrows, OBS_COLS))
        obs[:, 0], obs[:, 1], obs[:, 2] = r["obs_seq"], r["lane"], r["side"]
        obs[:, 3 : 3 + layout.G_GLOB] = r["glob"]
        e = 3 + layout.G_GLOB
        obs[:, e : e + 32 * layout.F_ENT] = r["ent"][:, :32].reshape(self.nrows, -1)
        obs[:, e + 32 * layout.F_ENT :] = r["ent_type"][:, :32]
        return obs

    def reset(self, *, seed=None, options=None):
        return self._wait_obs(), {}

    def step(self, action):
        r = self.rows
        r["action"] = action
        r["act_seq"] = r["obs_seq"]
        os.write(self.act_fd, (1).to_bytes(8, "little"))
        return self._wait_obs(), np.zeros(1)[0], False, False, {}

    def close(self):
        self.table.request_stop()
        os.write(self.act_fd, (1).to_bytes(8, "little"))
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.table.unlink()
        self.table.close()


def _gym_env(lanes):
    import gymnasium as gym  # noqa: PLC0415

    class _Env(NullGameEnv, gym.Env):
        pass

    return _Env(lanes)


def run_gym(count: int, lanes: int, warm_s: float, window_s: float) -> dict:
    from functools import partial  # noqa: PLC0415

    from gymnasium.vector import AsyncVectorEnv  # noqa: PLC0415

    envs = AsyncVectorEnv([partial(_gym_env, lanes) for _ in range(count)], shared_memory=True)
    try:
        obs, _ = envs.reset()

        def act(obs):
            seq = obs[..., 0].astype(np.uint64).ravel()
            lane = obs[..., 1].astype(np.uint32).ravel()
            side = obs[..., 2].astype(np.uint32).ravel()
            return layout.check_answer(seq, lane, side).reshape(count, lanes * 2, layout.N_HEADS).astype(np.int64)

        t_warm = time.monotonic() + warm_s
        while time.monotonic() < t_warm:
            obs, *_ = envs.step(act(obs))
        steps, t0, c0 = 0, time.monotonic(), cpu_s()
        while time.monotonic() - t0 < window_s:
            obs, *_ = envs.step(act(obs))
            steps += count * lanes * 2
        t1 = time.monotonic()
        return dict(steps_s=steps / (t1 - t0), cpu_us=(cpu_s() - c0) / steps * 1e6, rows_round=count * lanes * 2)
    finally:
        envs.close()


# ---- the gather/answer work alone, C against numpy -----------------------------------


def bench_gather(rows: int, n_ent: int, rounds: int = 3000) -> dict:
    t = Table(segment_name("benchg"), rows)
    out = {}
    try:
        r = t.rows
        r["row_magic"] = layout.ROW_MAGIC
        r["n_ent"] = n_ent
        r["mask"][:, :, :8] = 1
        for name, cls in (("numpy", NumpyGatherer), ("c", CGatherer)):
            g = cls(t, 1, 8)
            g.attach_game(0, slice(0, rows), Doorbell(-1, 8))
            g.acked[:] = r["obs_seq"]  # taking over the table: every row answered
            acts = np.zeros((rows, layout.N_HEADS), np.int32)
            vers = np.zeros(rows, np.uint32)
            t0 = time.perf_counter()
            for _ in range(rounds):
                r["obs_seq"] += 1  # every row waiting again
                b = g.gather()
                g.answer(b.rows[: b.n], b.obs_seq[: b.n], acts, vers)
            out[name] = (time.perf_counter() - t0) / rounds * 1e6
            assert b.n == rows
    finally:
        t.unlink()
        t.close()
    return out


# ---- the table ------------------------------------------------------------------------


def median_of(fn, repeats: int) -> dict:
    runs = [fn() for _ in range(repeats)]  # a figure's median; what is not a number, the first run's
    return {k: statistics.median(r[k] for r in runs) if isinstance(v, (int, float)) else v for k, v in runs[0].items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warm", type=float, default=1.0, help="seconds of warm-up after every game posted")
    p.add_argument("--window", type=float, default=4.0, help="seconds measured")
    p.add_argument("--no-wine", action="store_true")
    p.add_argument("--no-gym", action="store_true")
    p.add_argument("--gather", action="store_true", help="only the C vs numpy gather/answer table")
    p.add_argument("--sandbox", action="store_true", help="only sandboxed against unsandboxed games, start times")
    p.add_argument("--prefix", action="store_true", help="with --sandbox: only a Wine prefix shared against per game")
    p.add_argument("--accounting", action="store_true", help="only accounting on against off, and Wine's sync")
    a = p.parse_args()
    if a.accounting:
        bench_accounting(a.repeats, a.warm, a.window, bool(not a.no_wine and shutil.which("wine") and NULL_EXE.exists()))
        return 0
    if a.sandbox:
        wine = bool(not a.no_wine and shutil.which("wine") and NULL_EXE.exists())
        if not a.prefix:
            bench_sandbox(a.repeats, a.warm, a.window, wine)
        if wine:
            bench_prefix(a.repeats)
        return 0

    print("gather+check+answer of one round, us (median machine noise applies; ratios matter)")
    print(f"{'rows':>6} {'entities':>9} {'numpy us':>10} {'C us':>8} {'C speed-up':>11}")
    for rows, n_ent in ((16, 8), (64, 8), (64, 64), (256, 32)):
        g = bench_gather(rows, n_ent)
        print(f"{rows:>6} {n_ent:>9} {g['numpy']:>10.1f} {g['c']:>8.1f} {g['numpy'] / g['c']:>10.1f}x")
    if a.gather:
        return 0

    # (runtime, processes, lanes, target, round_period_ms); sub-ms periods act as "one more
    # loop pass before the round" (uvloop's timers are whole ms): more games per round.
    configs = [("native", 16, 1, 150_000, 0.0), ("native", 8, 4, 400_000, 0.0), ("native", 8, 4, 400_000, 0.1)]
    if not a.no_wine and shutil.which("wine") and NULL_EXE.exists():
        configs.append(("wine", 8, 1, 120_000, 0.0))
    print()
    print(f"null games, {a.repeats} runs each, median; window {a.window:.0f} s after {a.warm:.0f} s warm-up")
    hdr = (f"{'runtime':<8} {'games':>5} {'lanes':>5} {'round ms':>8} {'steps/s':>10} {'target':>8} {'sup us/step':>12} "
           f"{'rows/round':>11} {'gym steps/s':>12} {'ratio':>6}")
    print(hdr)
    print("-" * len(hdr))
    for runtime, count, lanes, target, round_ms in configs:
        m = median_of(lambda: run_supervisor(runtime, count, lanes, a.warm, a.window, round_ms=round_ms), a.repeats)
        gym = None
        if runtime == "native" and not a.no_gym and not round_ms:
            gym = median_of(lambda: run_gym(count, lanes, a.warm, a.window), a.repeats)
        gym_s = f"{gym['steps_s']:>12,.0f} {m['steps_s'] / gym['steps_s']:>5.1f}x" if gym else f"{'-':>12} {'-':>6}"
        print(f"{runtime:<8} {count:>5} {lanes:>5} {round_ms:>8g} {m['steps_s']:>10,.0f} {target:>8,} {m['cpu_us']:>12.2f} "
              f"{m['rows_round']:>11.1f} {gym_s}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
