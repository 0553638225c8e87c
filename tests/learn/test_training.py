"""The learning side in the supervisor's loop, with real games: rounds batch many rows,
the policy learns through the whole harness, resume is exact, and bad rows never
reach the network or the learner."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from w3async import compose
from w3async.learn.checkpoint import load_latest
from w3async.recipes import recipe_from_dict
from w3async.runtime.supervisor import Supervisor

from tests.conftest import REPO
from tests.runtime.test_supervisor import assert_nothing_left, events

SMALL_NET = {"d_model": 32, "n_heads": 2, "n_layers": 1}


def lines(path: Path, event: str) -> list[dict]:
    if not path.exists():
        return []
    return [x for x in map(json.loads, path.read_text().splitlines()) if x["event"] == event]


def learn_recipe(count=4, lanes=2, env=None, **sections) -> dict:
    d = {
        "name": "learn", "game": "null",
        "games": [{"binary": str(REPO / "build/native/null_game"), "count": count, "lanes": lanes, "nice": 0,
                   "env": {"W3N_CHECK": "0", "W3N_LEARN": "1", "W3N_EPISODE_STEPS": "32", **(env or {})}}],
        "supervisor": {"policy": "network", "progress_s": 0},
        "network": SMALL_NET,
        "learner": {"lr": 3e-3, "gamma": 0.5, "update_epochs": 2, "minibatch_seqs": 8, "ent_coef": 0.003,
                    "num_threads": 1},
        "trajectories": {"seq_len": 8, "seqs_per_batch": 16},
        "checkpoint": {"every_updates": 2},
    }
    for k, v in sections.items():
        d.setdefault(k, {}).update(v)
    return d


def learn_toml(episode_steps: int = 32, every_updates: int = 2, more: str = "") -> str:
    """A small learning recipe on two null games, as a file for `w3async run`; `more`:
    sections of its own (TOML)."""
    return f'''
name = "learn"
game = "null"
[[games]]
binary = "{REPO / 'build/native/null_game'}"
count = 2
lanes = 2
nice = 0
env = {{ W3N_CHECK = "0", W3N_LEARN = "1", W3N_EPISODE_STEPS = "{episode_steps}" }}
[supervisor]
policy = "network"
progress_s = 0
[network]
d_model = 32
n_heads = 2
n_layers = 1
[trajectories]
seq_len = 8
seqs_per_batch = 8
[checkpoint]
every_updates = {every_updates}
{more}'''


async def run(data: dict, run_dir: Path) -> tuple[Supervisor, dict]:
    sup = compose.supervisor(recipe_from_dict(data), run_dir)
    return sup, await sup.run()


async def test_policy_learns_through_the_harness(tmp_path, null_native):
    """The null game's bandit (W3N_LEARN): the target is shown one-hot in the global
    features and rewarded; random play earns 0.25 a step. Through rounds, trajectories, the learner
    and weight publishing, the episode return rises well above that."""
    data = learn_recipe(stop={"updates": 60, "seconds": 150})
    sup, stats = await run(data, tmp_path / "run")
    eps = lines(tmp_path / "run" / "episodes.jsonl", "episode")
    assert len(eps) > 100
    assert max(e["return"] for e in eps) <= 31  # 31 rewarded steps an episode of 32
    per_step = [e["return"] / 31 for e in eps]
    first, last = np.mean(per_step[:40]), np.mean(per_step[-40:])
    assert first < 0.45, first  # near random at the start
    assert last > 0.7, (first, last)  # far above random at the end
    ups = lines(tmp_path / "run" / "learner.jsonl", "update")
    assert len(ups) >= 20 and all(math.isfinite(u["policy_loss"]) for u in ups)
    assert_nothing_left(sup, tmp_path / "run")


async def test_a_greedy_evaluation_answers_its_rows_by_the_current_policys_argmax(tmp_path, null_native):
    """evaluation.greedy: the evaluation group's rows are answered by the engine's greedy
    twin of the current policy (every publish loads it), its episodes tallied as
    evaluation ones; the train rows still sample and train."""
    data = learn_recipe(count=1, stop={"updates": 4, "seconds": 120}, evaluation={"greedy": True})
    data["games"].append(dict(data["games"][0], role="eval"))
    sup, stats = await run(data, tmp_path / "run")
    a = sup.answerer
    twin = a.engine.greedy_net
    eval_rows = np.flatnonzero(a.row_role == 1)
    assert twin == a.engine.n_nets - 1 and a.engine.nets[twin].greedy and not a.engine.nets[0].greedy
    assert len(eval_rows) == 4 and (a.row_net[eval_rows] == twin).all() and (a.row_net[a.row_role == 0] == 0).all()
    assert a.engine.versions[twin] == a.engine.versions[0] >= 3  # published with every update
    eps = lines(tmp_path / "run" / "episodes.jsonl", "episode")
    assert any(e["eval"] for e in eps) and any(not e["eval"] for e in eps)
    assert len(lines(tmp_path / "run" / "learner.jsonl", "update")) >= 4
    assert_nothing_left(sup, tmp_path / "run")


async def test_rounds_batch_many_rows_with_16_games(tmp_path, null_native):
    """One round answers every row waiting, not one row a round. The 50 ms round period
    makes that independent of the machine's load: a loaded 2-core CI machine (round latency
    ~20 ms) gave 7 rows a round at a 2 ms period, 31 here at rest; at 50 ms even games
    that post out of phase leave ~32 x 50 / (50 + latency) rows for each round."""
    data = learn_recipe(count=16, lanes=1, stop={"steps": 4000, "seconds": 90},
                        supervisor={"round_period_ms": 50})
    sup, stats = await run(data, tmp_path / "run")
    rounds = lines(tmp_path / "run" / "inference.jsonl", "rounds")
    assert rounds, "no inference.jsonl lines"
    rows = sum(r["rows"] for r in rounds)
    assert rows / sum(r["rounds"] for r in rounds) > 8, rounds[-3:]  # 32 rows waiting at most
    assert stats["rows_per_round"] > 8


async def test_resume_is_exact(tmp_path, null_native):
    run_dir = tmp_path / "run"
    data = learn_recipe(stop={"updates": 4, "seconds": 120})
    await run(data, run_dir)
    ckpt = load_latest(run_dir)
    assert ckpt is not None and ckpt["learner"]["version"] >= 4
    # A supervisor set up on the same folder resumes exactly what was saved.
    sup = compose.supervisor(recipe_from_dict(data), run_dir)
    await sup.setup()  # the checkpoint is loaded (or the run refused) as the training side is made
    try:
        tr = sup.answerer
        saved = ckpt["learner"]
        assert tr.learner.version == saved["version"] and tr.learner.steps_trained == saved["steps_trained"]
        for k, v in saved["net"].items():
            assert torch.equal(tr.learner.net.state_dict()[k], v), k
        opt_now, opt_saved = tr.learner.opt.state_dict(), saved["opt"]
        for pid, st in opt_saved["state"].items():
            for k, v in st.items():
                assert torch.equal(opt_now["state"][pid][k], v)
        assert tr.league.state_dict()["snapshots"] == ckpt["league"]["snapshots"]
        assert sup.agent_steps == ckpt["counters"]["agent_steps"] and tr.episodes == ckpt["counters"]["episodes"]
    finally:
        await sup.close()
    # and a real second run goes on from there
    data["stop"] = {"updates": ckpt["learner"]["version"] + 2, "seconds": 120}
    sup2, stats = await run(data, run_dir)
    # rows a round over this start's steps and rounds (before: the whole run's steps over
    # this start's rounds, 2-3x too many)
    assert stats["resumed_steps"] == ckpt["counters"]["agent_steps"] and stats["rounds"] > 0
    assert stats["rows_per_round"] == pytest.approx((stats["agent_steps"] - stats["resumed_steps"]) / stats["rounds"])
    resumed = [e for e in events(run_dir) if e["event"] == "resume"]
    assert resumed and resumed[-1]["updates"] == ckpt["learner"]["version"]
    assert resumed[-1]["agent_steps"] == ckpt["counters"]["agent_steps"]
    ups = lines(run_dir / "learner.jsonl", "update")
    versions = [u["update"] for u in ups]
    assert versions == sorted(versions) and versions[-1] >= ckpt["learner"]["version"] + 2


@pytest.mark.parametrize("mode", ["nan", "type"])
async def test_bad_rows_never_reach_the_network_or_learner(tmp_path, null_native, mode):
    data = learn_recipe(count=2, lanes=2, env={"W3N_ROGUE": mode, "W3N_ROGUE_STEP": "25"},
                        stop={"updates": 3, "seconds": 60})
    sup, stats = await run(data, tmp_path / "run")
    bad = [e for e in events(tmp_path / "run") if e["event"] == "bad_row"]
    assert bad and bad[0]["field"] == {"nan": "glob", "type": "ent_type"}[mode]
    assert not [e for e in events(tmp_path / "run") if e["event"] == "learner_failed"]
    ups = lines(tmp_path / "run" / "learner.jsonl", "update")
    assert ups and all(math.isfinite(u["policy_loss"]) and math.isfinite(u["value_loss"]) for u in ups)
    assert sum(g["causes"].get("bad_row", 0) for g in stats["games"].values()) >= 1


async def test_learner_failure_stops_the_run_with_a_resumable_checkpoint(tmp_path, null_native, monkeypatch):
    """An exception in the learner's thread (here injected at its third update) stops the
    run with the error, never hangs the loop, and leaves a checkpoint that resumes."""
    from w3async.learn import learner as learner_mod
    from w3async.runtime.supervisor import RunError

    real = learner_mod.Learner.run_update
    calls = []

    def failing(self, tb):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected learner fault")
        return real(self, tb)

    monkeypatch.setattr(learner_mod.Learner, "run_update", failing)
    data = learn_recipe(stop={"seconds": 60})
    sup = compose.supervisor(recipe_from_dict(data), tmp_path / "run")
    with pytest.raises(RunError, match="learner failed: RuntimeError\\('injected learner fault'\\)"):
        await sup.run()
    assert [e for e in events(tmp_path / "run") if e["event"] == "learner_failed"]
    ckpt = load_latest(tmp_path / "run")
    assert ckpt is not None and ckpt["learner"]["version"] == 2
    assert_nothing_left(sup, tmp_path / "run")


def test_sigkilled_supervisor_resumes_with_the_saved_counters(tmp_path, null_native):
    """SIGKILL the supervisor mid-run (after a checkpoint), start it again on the same run
    folder: it cleans up what the dead run left and resumes from the last checkpoint with
    its counters, weights and league."""
    import signal
    import subprocess
    import sys
    import time

    from w3async.sync.table import list_segments

    recipe = tmp_path / "learn.toml"
    recipe.write_text(learn_toml())
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(runs), "--run", "k"]
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 90
        while time.time() < deadline and not (load_latest(runs / "k") or {}).get("learner", {}).get("version", 0) >= 4:
            time.sleep(0.5)
    finally:
        p.kill()
        p.wait()
    saved = load_latest(runs / "k")
    assert saved is not None and saved["learner"]["version"] >= 4
    shm = [e for e in events(runs / "k") if e["event"] == "run_start"][0]["shm"]
    assert [x for x in list_segments() if x.startswith(shm)]  # left by the killed run (its per-game segments too)
    r = subprocess.run(cmd + ["--set", f"stop.updates={saved['learner']['version'] + 2}", "--set", "stop.seconds=90"],
                       cwd=REPO, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    ev = events(runs / "k")
    prev = [e for e in ev if e["event"] == "previous_run"]
    assert len(prev) == 1 and prev[0]["dead_pid"] == p.pid and prev[0]["shm_unlinked"]
    assert not [x for x in list_segments() if x.startswith(shm)]
    resumed = [e for e in ev if e["event"] == "resume"]
    assert len(resumed) == 1
    # read after the kill, so nothing wrote a newer one: the new run resumed exactly this
    assert Path(resumed[0]["checkpoint"]).name == Path(saved["path"]).name
    assert resumed[0]["updates"] == saved["learner"]["version"]
    assert resumed[0]["agent_steps"] == saved["counters"]["agent_steps"]
    ups = lines(runs / "k" / "learner.jsonl", "update")
    second = [u["update"] for u in ups if u["update"] > resumed[0]["updates"]]
    assert second and second[0] == resumed[0]["updates"] + 1


async def test_league_and_game_churn_never_breaks_a_round(tmp_path, null_native, caplog):
    """A league snapshot every update, two tiny past-snapshot nets that
    are reloaded all the time (every self-play episode of 4 steps plays a snapshot), and a
    game SIGKILLed every 30 rounds, for 2,500 rounds. No round may fail (the submit /
    net-load race), no exception may reach the loop, and every row the engine took got
    exactly one answer (or was dropped because its game restarted while it computed)."""
    import asyncio
    import logging
    import os
    import random
    import signal

    caplog.set_level(logging.WARNING)
    data = learn_recipe(
        count=4, lanes=2, env={"W3N_EPISODE_STEPS": "4"},
        network={"d_model": 16, "n_heads": 2, "n_layers": 1},
        inference={"n_nets": 3},
        league={"snapshot_every": 1, "latest_share": 0.0, "max_snapshots": 6},
        learner={"update_epochs": 1, "minibatch_seqs": 4, "update_pause_ms": 0},
        trajectories={"seq_len": 4, "seqs_per_batch": 4},
        checkpoint={"every_updates": 25},
        supervisor={"backoff_s": 0.01, "backoff_max_s": 0.05, "restart_budget": 1_000_000,
                    "max_start_failures": 1000},
        status={"enabled": False},
        stop={"seconds": 300})  # a cap only: the run stops after ROUNDS rounds
    run_dir = tmp_path / "run"
    sup = compose.supervisor(recipe_from_dict(data), run_dir)
    kills = []
    ROUNDS, KILL_EVERY = 2500, 30  # a game SIGKILLed every 30 rounds

    async def killer():
        rng = random.Random(0)
        next_kill = KILL_EVERY
        while not sup.stopping:
            await asyncio.sleep(0.02)
            if sup.rounds >= ROUNDS:
                sup.request_stop()
                return
            if sup.rounds < next_kill:
                continue
            live = [s for s in sup.slots if s.proc is not None and s.proc.returncode is None and s.posted]
            if live:
                s = rng.choice(live)
                try:
                    os.kill(s.proc.pid, signal.SIGKILL)
                    kills.append(s.index)
                    next_kill = sup.rounds + KILL_EVERY
                except ProcessLookupError:
                    pass

    task = asyncio.create_task(killer())
    try:
        await sup.run()
    finally:
        task.cancel()
    tr = sup.answerer
    ev = events(run_dir)
    errors = [e for e in ev if e.get("level") == "error"]
    assert not errors, errors[:5]
    assert tr.failure is None and sup.error is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[-3000:]
    print(f"rounds {sup.rounds}, kills {len(kills)}, rows {tr.rows_submitted} submitted, {tr.rows_answered} answered, "
          f"{tr.rows_stale} stale, updates {tr.learner.version}, snapshots {len(tr.league.snapshots)}")
    assert sup.rounds >= ROUNDS, sup.rounds  # not stopped by the cap
    assert len(kills) >= ROUNDS // KILL_EVERY // 2
    crashes = [e for e in ev if e["event"] == "game_restart" and e["cause"] == "crash"]
    assert len(crashes) >= len(kills) * 0.8
    # every row the engine took was answered once, or dropped as stale after a restart
    assert tr.answer_errors == 0
    assert tr.rows_submitted == tr.rows_answered + tr.rows_stale + tr.rows_in_flight
    assert tr.rows_stale > 0  # restarts did land while rounds computed
    assert sup.agent_steps == tr.rows_answered
    ups = lines(run_dir / "learner.jsonl", "update")
    assert len(ups) >= 20 and len(tr.league.snapshots) == len(ups)  # a snapshot every update
    league_eps = [e for e in lines(run_dir / "episodes.jsonl", "episode") if e["opponent"].startswith("league:")]
    assert len({e["opponent"] for e in league_eps}) >= 10  # many snapshots were loaded into the slots and played
    assert_nothing_left(sup, run_dir)


def test_logs_after_a_sigkill_and_resume_count_nothing_twice(tmp_path, null_native):
    """SIGKILL a run after updates beyond its last checkpoint (a dead tail
    in every log), resume it: the lines beyond the checkpoint are moved to <log>.cut, each
    log gets a `resume` record with the checkpoint's counters, and afterwards every update
    is in learner.jsonl exactly once, the episodes and rows in the logs are exactly what the
    final checkpoint counts, and `python -m w3async status` reports the updates kept."""
    import signal
    import subprocess
    import sys
    import time

    recipe = tmp_path / "learn.toml"
    recipe.write_text(learn_toml(episode_steps=8, every_updates=3, more="""[status]
enabled = false
[learner]
update_pause_ms = 50
update_epochs = 2
minibatch_seqs = 2
"""))
    runs, k = tmp_path / "runs", tmp_path / "runs" / "k"
    cmd = [sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(runs), "--run", "k"]
    p = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def beyond() -> bool:  # updates logged past the last checkpoint: the kill leaves a dead tail
        ck = load_latest(k) if (k / "checkpoints" / "latest").exists() else None
        ups = lines(k / "learner.jsonl", "update")
        return ck is not None and ck["learner"]["version"] >= 3 and ups and ups[-1]["update"] > ck["learner"]["version"]

    try:
        deadline = time.time() + 90
        while time.time() < deadline and not beyond():
            time.sleep(0.05)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    saved = load_latest(k)
    v = saved["learner"]["version"]
    dead = [u["update"] for u in lines(k / "learner.jsonl", "update") if u["update"] > v]
    assert dead, "no update beyond the checkpoint when the run was killed"
    episodes_before = len(lines(k / "episodes.jsonl", "episode"))
    assert episodes_before > saved["counters"]["episodes"]  # the dead tail holds episodes the checkpoint does not count
    final = max(dead) + 3
    r = subprocess.run(cmd + ["--set", f"stop.updates={final}", "--set", "stop.seconds=90"],
                       cwd=REPO, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    # the dead tail was cut, not counted
    assert [u["update"] for u in lines(k / "learner.jsonl.cut", "update")] == dead
    ups = [u["update"] for u in lines(k / "learner.jsonl", "update")]
    assert ups == list(range(1, final + 1)), ups  # every update exactly once
    for name in ("learner.jsonl", "episodes.jsonl", "inference.jsonl"):
        res = lines(k / name, "resume")
        assert len(res) == 1 and res[0]["updates"] == v and res[0]["agent_steps"] == saved["counters"]["agent_steps"]
        assert res[0]["episodes"] == saved["counters"]["episodes"]
        assert res[0]["cut_lines"] > 0 or name == "inference.jsonl"  # a line a second: its tail may be empty
    end = load_latest(k)
    assert end["learner"]["version"] == final
    assert len(lines(k / "episodes.jsonl", "episode")) == end["counters"]["episodes"]
    assert sum(x["rows"] for x in lines(k / "inference.jsonl", "rounds")) == end["counters"]["agent_steps"]
    st = subprocess.run([sys.executable, "-m", "w3async", "status", str(k)], cwd=REPO, capture_output=True,
                        text=True, timeout=60)
    assert st.returncode == 0 and f"learner  {final} updates" in st.stdout, st.stdout + st.stderr
    assert f"episodes {end['counters']['episodes']:,} " in st.stdout, st.stdout


async def test_learner_lines_carry_the_schedules_kl_limit_and_value_norm(tmp_path, null_native):
    """The [learner] switches through the harness: the lr decays over stop.updates (the
    run's progress), each update line says its lr, entropy coefficient, KL stop, gradient
    norm and return statistics; a checkpoint keeps the run's seconds."""
    data = learn_recipe(count=2, stop={"updates": 4, "seconds": 90},
                        learner={"lr_schedule": "linear", "lr_min": 1e-4, "ent_schedule": "linear",
                                 "target_kl": 0.05, "norm_value": True})
    await run(data, tmp_path / "run")
    ups = lines(tmp_path / "run" / "learner.jsonl", "update")
    assert [u["update"] for u in ups] == [1, 2, 3, 4]
    # update k runs at progress (k - 1) / 4: lr 3e-3 -> 1e-4
    assert [u["lr"] for u in ups] == pytest.approx([3e-3 - (3e-3 - 1e-4) * k / 4 for k in range(4)])
    assert ups[0]["ent_coef"] == pytest.approx(0.003) and ups[-1]["ent_coef"] < 0.003
    for u in ups:
        assert {"kl_stopped", "minibatches", "minibatches_planned", "grad_norm", "value_mean", "value_std"} <= set(u)
        assert u["minibatches"] <= u["minibatches_planned"] and u["value_std"] > 0
    assert load_latest(tmp_path / "run")["counters"]["seconds"] > 0


def test_every_run_is_made_by_the_composition_root():
    """runtime/ imports nothing of learn/ nor cluster/ (w3async/compose.py picks the
    answerer and the cluster link); a Supervisor has no answerer of its own to fall back
    on (it is handed one), so the choice is made once: one answerer_for in the package,
    and the entry points above the root (the CLI, eval, the env) make their runs through
    compose.supervisor()."""
    import ast
    import inspect

    def imports(f: Path) -> list[str]:
        out = []
        for node in ast.walk(ast.parse(f.read_text())):
            out += [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        return out

    pkg = REPO / "w3async"
    found = [f"{f.name}: {n}" for f in sorted((pkg / "runtime").glob("*.py")) for n in imports(f)
             if n.startswith(("w3async.learn", "w3async.cluster", "w3async.compose"))]
    assert found == []
    assert inspect.signature(Supervisor).parameters["answerer"].default is inspect.Parameter.empty
    sources = {f: f.read_text() for f in pkg.rglob("*.py")}
    assert [f.name for f, text in sources.items() if "def answerer_for" in text] == ["compose.py"]
    makers = sorted(str(f.relative_to(pkg)) for f, text in sources.items() if "Supervisor(" in text
                    and f.name not in ("supervisor.py", "compose.py"))
    assert makers == ["cluster/gamehost.py"], makers  # below the root: it hands its own answerer
    for entry in ("__main__.py", "learn/evaluate.py", "env/bridge.py"):
        assert "supervisor(" in sources[pkg / entry], entry


async def test_a_fixed_policys_run_writes_the_episodes_a_learners_would(tmp_path):
    """The random policy on the duel, a train group against easy and an eval group against
    normal: episodes.jsonl gets each finished episode (labelled, eval or not, with its
    result and return) and the offline `status` the evaluation lines, as for a learner:
    the random baseline a learner is compared with (before: no episodes.jsonl at all)."""
    import subprocess
    import sys

    subprocess.run(["make", "-s", "-C", "games/duel", "native", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    duel = REPO / "build" / "native" / "duel"
    env = {"W3D_REWARD": "win", "W3D_TIME_LIMIT": "40"}
    data = {"name": "baseline", "game": "duel", "supervisor": {"policy": "random", "progress_s": 0},
            "games": [{"binary": str(duel), "count": 1, "lanes": 4, "sides": 1, "env": dict(env, W3D_SIDES="agent,ai:easy")},
                      {"binary": str(duel), "count": 1, "lanes": 4, "sides": 1, "role": "eval",
                       "env": dict(env, W3D_SIDES="agent,ai:normal", W3D_SEED="9002")}],
            "stop": {"seconds": 4}}
    sup = compose.supervisor(recipe_from_dict(data), tmp_path / "run")
    await sup.run()
    eps = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    eps = [e for e in eps if e["event"] == "episode"]
    train = [e for e in eps if not e["eval"]]
    evals = [e for e in eps if e["eval"]]
    assert train and {e["opponent"] for e in train} == {"ai:easy"}, eps[:3]
    assert evals and {e["opponent"] for e in evals} == {"ai:normal"}, eps[:3]
    assert {e["result"] for e in eps} <= {"win", "loss", "draw", "truncated"} and all(e["steps"] > 0 for e in eps)
    assert {e["policy_version"] for e in eps} == {0} and {e["slot"] for e in evals} == {1}
    # 40 turns: no base falls, every game ends at the time limit, on the tie-break (the
    # duel's TIME_LIMIT flag): its wins are not decisive (w3async/outcomes.py).
    assert {e["end"] for e in eps if e["result"] != "truncated"} == {"time_limit"}, eps[:3]
    won = sum(e["result"] == "win" for e in evals)
    out = subprocess.run([sys.executable, "-m", "w3async", "status", str(tmp_path / "run")], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "vs ai:normal" in out.stdout and f"in {len(evals)} games" in out.stdout, out.stdout
    assert f"0 wins decisive, {won} at the time limit" in out.stdout, out.stdout
    assert_nothing_left(sup, tmp_path / "run")


def test_a_resumed_run_is_live_and_names_its_since_the_resume_figures(tmp_path, null_native):
    """A run stopped and resumed through the CLI: while the resume runs, its /status (the
    dashboard's source), `python -m w3async status` and the progress line read live, the
    uptime this start's and said to be since the resume, the steps the whole run's; after
    it, the offline status's steps/s is the resumed start's own average. Before: the
    resumed run read as ended with a negative uptime, and steps/s divided the whole run's
    steps by the resume's seconds."""
    import subprocess
    import sys
    import time
    import urllib.request

    recipe = tmp_path / "learn.toml"
    recipe.write_text(learn_toml() + "[status]\nport = 0\n")
    runs, k = tmp_path / "runs", tmp_path / "runs" / "k"
    cmd = [sys.executable, "-m", "w3async", "run", str(recipe), "--runs-dir", str(runs), "--run", "k"]
    first = subprocess.run(cmd + ["--set", "stop.updates=4", "--set", "stop.seconds=90"], cwd=REPO,
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    before = load_latest(k)["counters"]["agent_steps"]
    (k / "status.url").unlink(missing_ok=True)
    p = subprocess.Popen(cmd + ["--set", "stop.seconds=12", "--set", "supervisor.progress_s=1"], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, st = time.time() + 90, None
        while time.time() < deadline:
            if (k / "status.url").exists():
                url = (k / "status.url").read_text().strip().rstrip("/")
                try:
                    st = json.loads(urllib.request.urlopen(url + "/status", timeout=5).read())
                except OSError:
                    st = None
                if st and st["steps"]["agent_steps"] > before:
                    break
            time.sleep(0.3)
        assert st, "no /status from the resumed run"
        cli = subprocess.run([sys.executable, "-m", "w3async", "status", str(k)], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    finally:
        out, _ = p.communicate(timeout=120)
    run = st["run"]
    assert run["live"] is True and run["ended"] is None and run["resumed_steps"] == before, run
    assert 0 < run["uptime_s"] < 60, run  # this start's seconds, not the whole run's, never negative
    assert st["steps"]["agent_steps"] > before  # the whole run's steps
    assert cli.returncode == 0 and "(live)" in cli.stdout and f"(resumed at {before:,} agent steps)" in cli.stdout, cli.stdout
    assert " s since resume |" in cli.stdout, cli.stdout
    assert p.returncode == 0 and " s since resume |" in out, out[-1500:]
    # finished: the offline steps/s is this start's steps over this start's seconds
    from w3async.observe.run_view import RunView

    view = RunView(k)
    view.refresh()
    done = view.status()
    end = [e for e in events(k) if e["event"] == "shutdown"][-1]
    assert done["run"]["live"] is False and done["run"]["resumed_steps"] == before
    assert done["steps"]["per_s"] == pytest.approx((end["agent_steps"] - before) / end["seconds"], rel=0.01), (done, end)
