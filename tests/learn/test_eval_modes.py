"""`w3async eval --greedy` (each head's argmax: the same actions whatever the sampling
seed) and `w3async eval A --against B` (checkpoint against checkpoint on the recipe's
two-sided group, counted from A's side)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from w3async import games
from w3async.learn.checkpoint import save_checkpoint
from w3async.learn.inference import InferenceEngine, synthetic_batch
from w3async.learn.learner import Learner, LearnerConfig
from w3async.learn.network import Network, obs_from_numpy
from w3async.recipes import recipe_from_dict, recipe_to_dict

from tests.conftest import REPO
from tests.learn.test_evaluate import duel_bin, duel_recipe, eval_cli  # noqa: F401 (duel_bin: a fixture)
from tests.learn.test_inference import CFG, SPEC, weights

torch.set_num_threads(1)


def two_sided_recipe(d_model: int = 16) -> dict:
    d = duel_recipe(d_model)
    d["games"].append({"binary": str(REPO / "build/native/duel"), "count": 1, "lanes": 1, "sides": 2, "nice": 0,
                       "env": {"W3D_REWARD": "attack", "W3D_TIME_LIMIT": "400", "W3D_SIDES": "agent,agent"}})
    return d


def checkpoint(run_dir, seed: int, d_model: int = 16):
    torch.manual_seed(seed)
    recipe = recipe_from_dict(two_sided_recipe(d_model))
    learner = Learner(Network(games.get("duel").spec, recipe.network), LearnerConfig())
    return save_checkpoint(run_dir, learner=learner.state_dict(), counters={}, league={"snapshots": []},
                           recipe=recipe_to_dict(recipe))


def test_greedy_actions_do_not_depend_on_the_sampling_seed():
    """Two engines of other sampling seeds (as `eval` makes them, net.greedy set or not)
    answer one batch: sampled actions differ, greedy ones are the same, each head's argmax."""
    b = synthetic_batch(SPEC, 64, np.random.default_rng(0))
    sd = weights(1)
    actions = {}
    for greedy in (False, True):
        for seed in (1, 2):
            eng = InferenceEngine(SPEC, CFG, n_nets=1, max_rows=64, seed=seed)
            for net in eng.nets:
                net.greedy = greedy
            eng.start()
            try:
                eng.publish(sd, 1)
                actions[greedy, seed] = eng.submit(b).result().actions
            finally:
                eng.stop()
    assert not np.array_equal(actions[False, 1], actions[False, 2])  # sampling: the seed matters
    assert np.array_equal(actions[True, 1], actions[True, 2])
    net = Network(SPEC, CFG).eval()
    net.load_state_dict(sd)
    obs = obs_from_numpy(b.glob[:64], b.ent.copy(), b.ent_type.copy(), b.n_ent[:64], b.mask[:64])
    with torch.no_grad():
        assert np.array_equal(actions[True, 1], net.act(obs, greedy=True).actions.numpy())


def test_eval_greedy_and_against(tmp_path, duel_bin):  # noqa: F811
    a, b = checkpoint(tmp_path / "a", seed=1), checkpoint(tmp_path / "b", seed=2)
    out = tmp_path / "g.json"
    p = eval_cli(a, "--games", 2, "--levels", "easy", "--greedy", "--json", out)
    assert p.returncode == 0, p.stderr
    r = json.loads(out.read_text())["levels"]["ai:easy"]
    assert r["games"] == 2 and r["wins"] + r["losses"] + r["draws"] + r["truncated"] == 2

    out = tmp_path / "vs.json"
    p = eval_cli(a, "--against", b, "--games", 3, "--parallel", 1, "--json", out, "--keep")
    assert p.returncode == 0, p.stderr
    levels = json.loads(out.read_text())["levels"]
    assert list(levels) == [f"vs:{b}"], levels
    r = levels[f"vs:{b}"]
    assert r["games"] == 3 and r["wins"] + r["losses"] + r["draws"] + r["truncated"] == 3
    run_dir = Path((p.stdout + p.stderr).split("; run folder ")[1].split()[0])
    try:
        (group,) = json.loads((run_dir / "recipe.json").read_text())["games"]
    finally:
        shutil.rmtree(run_dir.parent)
    assert group["sides"] == 2 and group["env"]["W3D_SIDES"] == "agent,agent" and group["env"]["W3D_REWARD"] == "win"

    other = checkpoint(tmp_path / "c", seed=3, d_model=32)
    p = eval_cli(a, "--against", other, "--games", 1)
    assert p.returncode == 2 and str(other) in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert "vs:" not in p.stdout  # nothing played
    p = eval_cli(a, "--against", b, "--levels", "easy")
    assert p.returncode == 2 and "--levels has no place" in p.stderr and str(b) in p.stderr, p.stderr
