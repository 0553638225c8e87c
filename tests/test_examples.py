"""The examples a Gymnasium, CleanRL or Stable-Baselines3 user starts from
(docs/env.md, "Examples"), run briefly: each trains on the duel through w3async.env,
logs under the names those libraries' users read, and saves a model that plays again
and that `w3async eval --policy` plays against the levels."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys

from tests.conftest import REPO, need


def _run(args: list[str], timeout: int = 300) -> str:
    r = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


def test_ppo_duel_logs_as_cleanrl_does_and_plays_its_saved_model(tmp_path):
    """examples/ppo_duel.py: the logging loop of CleanRL's ppo.py, as it is there
    (charts/episodic_return, charts/episodic_length from info["final_info"]), charts/SPS
    and losses/* in TensorBoard, the decisive win rate beside the win rate, a model saved in
    the run's folder that --play loads and plays to the end of its games."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = _run(["examples/ppo_duel.py", "--minutes", "0.15", "--num-steps", "32", "--save-model",
                "--tb-dir", str(tmp_path / "runs"), "--csv", str(tmp_path / "curve.csv"),
                "--recipe", "env-duel", "--seed", "2"])
    assert "decisive" in out, out[-500:]
    (run,) = (tmp_path / "runs").iterdir()
    ea = EventAccumulator(str(run))
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    for tag in ("charts/episodic_return", "charts/episodic_length", "charts/SPS", "losses/value_loss",
                "losses/approx_kl", "charts/win_rate", "charts/decisive_win_rate"):
        assert tag in tags, (tag, sorted(tags))
    lengths = [e.value for e in ea.Scalars("charts/episodic_length")]
    assert lengths and all(1 <= n <= 300 for n in lengths), lengths  # the duel's 6000 turns: 300 steps
    with open(tmp_path / "curve.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(float(r["decisive_win_rate_last100"]) <= float(r["win_rate_last100"]) for r in rows
                        if r["win_rate_last100"] != "nan"), rows
    model = run / "ppo_duel.model"
    played = _run(["examples/ppo_duel.py", "--play", str(model), "--games", "3"])
    assert f"{model}: 3 games" in played and "win rate" in played, played
    evaluated = _run(["-m", "w3async", "eval", str(model), "--policy", "examples/ppo_duel.py:eval_policy_greedy",
                      "--recipe", "env-duel", "--games", "2", "--levels", "easy", "--parallel", "1"])
    assert "ai:easy" in evaluated and "decisive" in evaluated, evaluated


def test_sb3_maskable_ppo_trains_under_the_games_masks_and_saves(tmp_path):
    """examples/sb3_duel.py --maskable: sb3-contrib's MaskablePPO through the VecEnv adapter
    (Monitor infos, action_masks()), its win-rate curve written per rollout with the
    decisive part, and SB3's model zip saved and loadable."""
    need("stable-baselines3 and sb3-contrib", bool(importlib.util.find_spec("sb3_contrib")),
         "pip install -e '.[examples]' (make test does)")
    model = tmp_path / "model.zip"
    out = _run(["examples/sb3_duel.py", "--maskable", "--timesteps", "2048", "--csv", str(tmp_path / "curve.csv"),
                "--save", str(model)])
    assert "sb3 MaskablePPO: 2048 steps" in out and f"saved {model}" in out, out[-800:]
    with open(tmp_path / "curve.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["agent_steps"]) for r in rows] == [1024, 2048], rows  # a row a rollout (8 envs x 128 steps)
    from sb3_contrib import MaskablePPO

    assert MaskablePPO.load(str(model), device="cpu").num_timesteps == 2048
    evaluated = _run(["-m", "w3async", "eval", str(model), "--policy", "examples/sb3_duel.py:eval_policy",
                      "--recipe", "env-duel", "--games", "2", "--levels", "easy", "--parallel", "1"])
    assert "ai:easy" in evaluated and "decisive" in evaluated, evaluated
