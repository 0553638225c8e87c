"""w3async.env's throughput (`make bench`): agent steps/s through the env API, beside
gymnasium's AsyncVectorEnv over the same games and beside w3async's own answerer path.

    .venv/bin/python bench/env_bench.py [--seconds S] [--repeats R] [--procs N] [--games null,duel]

The same games in every row: N processes of 1 lane and 1 agent side (the duel against
ai:easy; the null game with one agent side... its two sides are both agent rows, so a
null process gives 2 rows), answered with uniform allowed actions (masked random):
- `w3async.env step`: W3VectorEnv.step() over every row (one thread for the supervisor);
- `w3async.env send/recv`: EnvPool style, recv() of half the rows, oldest first;
- `gymnasium AsyncVectorEnv`: one worker process per game process, each a
  w3async.env.single.GameEnv (that one game as a gymnasium.Env: one env per game);
- `native answerer`: the supervisor's own path, the random policy as its answerer (no
  thread crossing, no per-step Python of the caller): the upper bound.
An agent step is one row answered. Each path runs --seconds after a warm-up, the four
paths in turn, --repeats times (each path's figure is the median of its repeats, its
range beside it: this shared machine's load changes within a minute, and a path measured
once can meet a quiet or a busy window alone). One run, one table: compare within it
(docs/performance.md).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import gymnasium as gym  # noqa: E402

import w3async.env as we  # noqa: E402
from w3async.env.single import GameEnv  # noqa: E402
from w3async.env.spaces import sample_masked  # noqa: E402

RECIPES = {"null": "env-null", "duel": "env-duel"}


def sets_for(procs: int) -> list[str]:
    return [f"games.count={procs}", "games.lanes=1", "supervisor.progress_s=0"]


def bench_step(recipe: str, procs: int, seconds: float) -> float:
    env = we.make(recipe, sets=sets_for(procs))
    try:
        obs, _ = env.reset()
        rng = np.random.default_rng(0)
        t_end, n, t0 = time.monotonic() + seconds + 1.0, 0, None
        while time.monotonic() < t_end:
            if t0 is None and time.monotonic() > t_end - seconds:
                t0, n = time.monotonic(), 0
            obs, *_ = env.step(sample_masked(obs["mask"], rng))
            n += env.num_envs
        return n / (time.monotonic() - t0)
    finally:
        env.close()


def bench_recv(recipe: str, procs: int, seconds: float) -> float:
    env = we.make(recipe, sets=sets_for(procs))
    env.close()
    env = we.make(recipe, sets=sets_for(procs), batch_size=max(1, env.num_envs // 2))
    try:
        obs, _ = env.reset()
        rng = np.random.default_rng(0)
        env.send(sample_masked(obs["mask"], rng), np.arange(env.num_envs))
        t_end, n, t0 = time.monotonic() + seconds + 1.0, 0, None
        while time.monotonic() < t_end:
            if t0 is None and time.monotonic() > t_end - seconds:
                t0, n = time.monotonic(), 0
            obs, rew, term, trunc, info = env.recv(timeout_s=60)
            env.send(sample_masked(obs["mask"], rng), info["env_id"])
            n += len(info["env_id"])
        return n / (time.monotonic() - t0)
    finally:
        env.close()


def bench_async(recipe: str, procs: int, seconds: float) -> float:
    venv = gym.vector.AsyncVectorEnv([lambda r=recipe: GameEnv(r, supervisor__progress_s=0) for _ in range(procs)], shared_memory=True)
    try:
        obs, _ = venv.reset(seed=0)
        rng = np.random.default_rng(0)
        per = 2 if recipe == "env-null" else 1
        t_end, n, t0 = time.monotonic() + seconds + 2.0, 0, None
        while time.monotonic() < t_end:
            if t0 is None and time.monotonic() > t_end - seconds:
                t0, n = time.monotonic(), 0
            mask = obs["mask"].reshape(-1, *obs["mask"].shape[-2:])
            acts = sample_masked(mask, rng).reshape(venv.action_space.shape)
            obs, *_ = venv.step(acts)
            n += procs * per
        return n / (time.monotonic() - t0)
    finally:
        venv.close()


def bench_native(recipe: str, procs: int, seconds: float) -> float:
    from w3async.env.run import env_recipe
    from w3async.runtime.policies import RandomPolicy
    from w3async.compose import supervisor

    r = env_recipe(recipe, sets_for(procs))
    n_rows = sum(g.count * g.lanes * g.sides for g in r.games)
    tmp = Path(tempfile.mkdtemp(prefix="w3async-envbench-"))
    sup = supervisor(r, tmp / "run", policy=RandomPolicy(n_rows), signals=False)
    marks = []

    async def main():
        task = asyncio.create_task(sup.run())
        await asyncio.sleep(1.0)
        marks.append((time.monotonic(), sup.agent_steps))
        await asyncio.sleep(seconds)
        marks.append((time.monotonic(), sup.agent_steps))
        sup.request_stop()
        return await task

    try:
        import uvloop

        uvloop.run(main())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (t1, s1), (t2, s2) = marks
    return (s2 - s1) / (t2 - t1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--procs", type=int, default=8, help="game processes (sub-envs of AsyncVectorEnv)")
    p.add_argument("--games", default="null,duel")
    p.add_argument("--repeats", type=int, default=3, help="each path measured this many times, in turn")
    a = p.parse_args()
    paths = {"w3async.env step": bench_step, "w3async.env send/recv": bench_recv,
             "gymnasium AsyncVectorEnv": bench_async, "native answerer": bench_native}
    print(f"{'game':<6} {'path':<26} {'agent steps/s':>14} {'range':>17} {'vs async':>9} {'vs native':>10}")
    for g in a.games.split(","):
        runs: dict[str, list[float]] = {k: [] for k in paths}
        for r in range(a.repeats):
            for k, bench in paths.items():
                runs[k].append(bench(RECIPES[g], a.procs, a.seconds))
            print(f"# {g}: repeat {r + 1} of {a.repeats}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in runs.items()),
                  file=sys.stderr, flush=True)
        res = {k: float(np.median(v)) for k, v in runs.items()}
        base, top = res["gymnasium AsyncVectorEnv"], res["native answerer"]
        for k, v in res.items():
            span = f"{min(runs[k]):,.0f}-{max(runs[k]):,.0f}"
            print(f"{g:<6} {k:<26} {v:>14,.0f} {span:>17} {v / base:>8.1f}x {100 * v / top:>9.0f}%", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
