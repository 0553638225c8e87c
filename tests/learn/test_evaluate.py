"""`python -m w3async eval`: a tiny duel checkpoint played against two levels for a few
short games, the counts add up; a bad path, a file that is not a checkpoint and a
checkpoint of another network shape are one clear line each and exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from w3async.learn.checkpoint import save_checkpoint
from w3async.learn.evaluate import EvalError, resolve
from w3async.learn.learner import Learner, LearnerConfig
from w3async.learn.network import Network
from w3async.recipes import recipe_from_dict, recipe_to_dict
from w3async import games

from tests.conftest import REPO

torch.set_num_threads(1)


def duel_recipe(d_model: int = 16) -> dict:
    env = {"W3D_REWARD": "win", "W3D_TIME_LIMIT": "400"}  # 20 steps a game: a few seconds in all
    return {
        "name": "tiny", "game": "duel",
        "games": [{"binary": str(REPO / "build/native/duel"), "count": 1, "lanes": 2, "sides": 1, "nice": 0,
                   "env": dict(env, W3D_SIDES="agent,ai:easy")},
                  {"binary": str(REPO / "build/native/duel"), "count": 1, "lanes": 1, "sides": 1, "nice": 0,
                   "role": "eval", "env": dict(env, W3D_SIDES="agent,ai:easy", W3D_SEED="9001")}],
        "supervisor": {"policy": "network", "progress_s": 0},
        "network": {"d_model": d_model, "n_heads": 2, "n_layers": 1},
    }


@pytest.fixture(scope="module")
def duel_bin():
    if not (REPO / "build/native/duel").exists():
        subprocess.run(["make", "-s", "build"], cwd=REPO, check=True)


def make_checkpoint(run_dir, d_model: int = 16, saved_as: int | None = None):
    """A checkpoint of a fresh d_model network whose recipe says saved_as (default the same)."""
    recipe = recipe_from_dict(duel_recipe(d_model))
    learner = Learner(Network(games.get("duel").spec, recipe.network), LearnerConfig())
    saved = recipe_to_dict(recipe_from_dict(duel_recipe(saved_as or d_model)))
    return save_checkpoint(run_dir, learner=learner.state_dict(), counters={}, league={"snapshots": []}, recipe=saved)


def eval_cli(*args, timeout=120, env=None):
    return subprocess.run([sys.executable, "-m", "w3async", "eval", *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env=None if env is None else {**os.environ, **env})


def test_eval_plays_each_level_and_reports_intervals(tmp_path, duel_bin):
    path = make_checkpoint(tmp_path / "run")
    out = tmp_path / "eval.json"
    p = eval_cli(tmp_path / "run", "--games", 3, "--levels", "easy,hard", "--parallel", 2, "--json", out)
    assert p.returncode == 0, p.stderr
    res = json.loads(out.read_text())
    assert res["checkpoint"] == str(path)  # a run folder without best.pt: the latest checkpoint
    assert list(res["levels"]) == ["ai:easy", "ai:hard"]
    for lvl, r in res["levels"].items():  # a truncated game is no game (w3async/outcomes.py)
        assert r["games"] + r["truncated"] == 3 and r["wins"] + r["losses"] + r["draws"] == r["games"]
        assert r["decisive_wins"] + r["time_limit_wins"] == r["wins"] and r["time_limit_losses"] <= r["losses"]
        assert 0 <= r["lo"] <= r["hi"] <= 1 and 0 <= r["decisive_lo"] <= r["decisive_hi"] <= 1
    assert "ai:easy" in p.stdout and "95% interval" in p.stdout and "decisive" in p.stdout, p.stdout
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("case", ["missing", "not_a_checkpoint", "other_shape", "empty_folder", "bad_level"])
def test_bad_checkpoints_are_one_clear_error(tmp_path, case):
    if case == "missing":
        arg, why = tmp_path / "nope.pt", "no such file or folder"
    elif case == "not_a_checkpoint":
        arg = tmp_path / "x.pt"
        arg.write_text("hello")
        why = "not a readable checkpoint"
    elif case == "other_shape":
        arg, why = make_checkpoint(tmp_path / "run", d_model=16, saved_as=32), "a checkpoint of another network"
    elif case == "empty_folder":
        (tmp_path / "run").mkdir()
        arg, why = tmp_path / "run", "a folder with no checkpoint"
    else:
        arg, why = make_checkpoint(tmp_path / "run"), "level 'impossible'"
    p = eval_cli(arg, "--games", 2, *(["--levels", "impossible"] if case == "bad_level" else []))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert str(arg) in p.stderr and why in p.stderr, p.stderr


def test_a_json_file_that_cannot_be_written_and_refusals_leave_nothing(tmp_path, duel_bin):
    """--json in a folder that does not exist, or naming a folder, was a traceback after every
    game was played; a refused eval (here: more processes than the machine takes) left an
    empty w3async-eval-* folder in $TMPDIR each time (2026-12-02). Now both are refused
    before anything is made or played: one line naming the file, exit 2."""
    make_checkpoint(tmp_path / "run")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    for json_arg, why in ((tmp_path / "nope" / "x.json", f"the folder {tmp_path / 'nope'} does not exist"),
                          (tmp_path, "--json names a folder, not a file")):
        p = eval_cli(tmp_path / "run", "--games", 1, "--levels", "easy", "--json", json_arg, env={"TMPDIR": str(tmp)})
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr and why in p.stderr, p.stderr
        assert "ai:easy" not in p.stdout  # no game was played
    p = eval_cli(tmp_path / "run", "--games", 1, "--parallel", 100_000, env={"TMPDIR": str(tmp)})
    assert p.returncode == 2 and "are more than this machine takes" in p.stderr, p.stderr
    assert os.listdir(tmp) == [] and not (tmp_path / "nope").exists()


def test_resolve_prefers_best_then_latest(tmp_path):
    ck = tmp_path / "checkpoints"
    ck.mkdir()
    with pytest.raises(EvalError):
        resolve(tmp_path)
    (ck / "latest").write_text("ckpt-00000004.pt\n")
    assert resolve(tmp_path) == ck / "ckpt-00000004.pt"
    (ck / "best.pt").write_bytes(b"")
    assert resolve(tmp_path) == ck / "best.pt" and resolve(ck) == ck / "best.pt"


def test_an_injected_games_evaluation_keeps_its_lanes_and_plays_each_levels_args():
    """eval of an injected game (pong-learn: the adapter takes one player a process) keeps
    the group's lanes (it gave 4 lanes a process: every start failed, the adapter naming
    its rows) unless --lanes says otherwise, and its level's command line at eval's seed;
    a game built for w3async gets one game a lane."""
    from w3async.learn.evaluate import plan
    from w3async.recipes import load_recipe

    data, _ = plan(load_recipe(REPO / "recipes/pong-learn.toml"), ["cpu"], 20, 2, 9001, {})
    (g,) = data["games"]
    assert g["lanes"] == 1 and g["count"] == 2 and g["inject"]["args"] == ["--seed", "9001", "--points", "11"]
    assert plan(load_recipe(REPO / "recipes/pong-learn.toml"), ["cpu"], 20, 2, 9001, {}, lanes=3)[0]["games"][0][
        "lanes"] == 3
    data, _ = plan(load_recipe(REPO / "recipes/fgself.toml"), ["ai:easy"], 20, 2, 9001, {})
    assert data["games"][0]["lanes"] == 10


OWN_POLICY = '''
import numpy as np

def load(model, spec):
    first = open(model).read().strip()  # "first": each head's first allowed choice
    assert first == "first", first
    def act(obs):
        assert obs["ent"].shape[1:] == (160, 16) and obs["mask"].shape[1:] == (4, 192)  # the env's shapes
        return obs["mask"].argmax(axis=2).astype(np.int64)
    return act

def wrong_shape(model, spec):
    return lambda obs: np.zeros((len(obs["glob"]), 2), np.int64)

def broken(model, spec):
    raise RuntimeError("weights of another model")
'''


def test_eval_plays_a_model_of_ones_own_through_policy(tmp_path, duel_bin):
    """`eval MODEL --policy FILE.py:FUNCTION --recipe R`: a model that is no w3async
    checkpoint (an example's, SB3's) plays every level of R's game and gets eval's table;
    the observations are the env's; a policy that answers the wrong shape stops the run
    naming it; a missing --recipe, an unloadable source or a loader that fails is one
    clear error. Before: eval read only its own checkpoints."""
    src, model = tmp_path / "mine.py", tmp_path / "mine.model"
    src.write_text(OWN_POLICY)
    model.write_text("first\n")
    out = tmp_path / "eval.json"
    p = eval_cli(model, "--policy", f"{src}:load", "--recipe", "env-duel", "--games", 2, "--levels", "easy",
                 "--parallel", 1, "--json", out)
    assert p.returncode == 0, (p.stdout, p.stderr)
    r = json.loads(out.read_text())["levels"]["ai:easy"]
    assert r["games"] + r["truncated"] == 2 and "ai:easy" in p.stdout, p.stdout
    bad = eval_cli(model, "--policy", f"{src}:wrong_shape", "--recipe", "env-duel", "--games", 2, "--levels", "easy",
                   "--parallel", 1)
    assert bad.returncode == 1 and "--policy failed" in bad.stdout + bad.stderr, (bad.stdout, bad.stderr)
    assert "not integer ones of shape" in bad.stdout + bad.stderr
    for args, why in (([model, "--policy", f"{src}:load"], "name the games and levels with --recipe"),
                      ([model, "--policy", f"{tmp_path / 'none.py'}:load", "--recipe", "env-duel"], "cannot load it"),
                      ([model, "--policy", f"{src}:broken", "--recipe", "env-duel"], "weights of another model"),
                      ([model, "--policy", "nocolon", "--recipe", "env-duel"], "FILE.py:FUNCTION")):
        p = eval_cli(*args)
        assert p.returncode == 2 and why in p.stderr and p.stderr.count("\n") == 1, (args, p.stderr)
