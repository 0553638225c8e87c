"""The row is the game's: a spec's declared shape (entities x features, globals, 1 to 8
action heads) is the rows' size in shared memory, what the game is told, the network's
inputs and the env's spaces, exactly; a game written for another shape is stopped with
both shapes named."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from gymnasium import spaces

from w3async import compose, games
from w3async.recipes import RecipeError, load_recipe, recipe_from_dict
from w3async.runtime.runfolder import RunError
from w3async.sync import layout

from tests.conftest import REPO

NULL = REPO / "build" / "native" / "null_game"

# One Discrete(3) head and an 8-float observation, no entities.
FLAT8 = {"entities": 0, "globals": 8, "n_types": 1, "head_sizes": [3], "opponent_default": "bot"}


def flat8_toml(tmp_path, policy: str = "random", seconds: float = 60, more: str = "") -> str:
    path = tmp_path / "flat8.toml"
    path.write_text(f'''
name = "flat8"
game = "flat8"
[spec]
entities = 0
globals = 8
n_types = 1
head_sizes = [3]
opponent_default = "bot"
[[games]]
binary = "{NULL}"
count = 1
lanes = 1
sides = 1
env = {{ W3N_CHECK = "0", W3N_EPISODE_STEPS = "20" }}
[supervisor]
policy = "{policy}"
progress_s = 0
[status]
enabled = false
[stop]
seconds = {seconds}
{more}''')
    return str(path)


@pytest.fixture(autouse=True)
def _forget_declared():
    yield
    for name in ("flat8", "wide", "duelish"):
        if games.is_declared(name):
            games.unregister(name)


def test_a_discrete_head_and_eight_floats_make_rows_of_that_size_and_exact_spaces(tmp_path, null_native):
    """Rows of one page (163 bytes used), said at start; the env's spaces are Box((8,))
    and Discrete(3); gymnasium's checker passes, and a step's observation is the 8 floats
    the game wrote."""
    from gymnasium.utils.env_checker import check_env

    from w3async.env.single import GameEnv

    path = flat8_toml(tmp_path)
    load_recipe(path)
    lay = games.get("flat8").spec.layout
    assert lay.shape == (0, 0, 8, 1, 3) and lay.row_size == 4096 and lay.obs_end == 163
    env = GameEnv(path)
    try:
        assert env.observation_space == spaces.Box(-np.inf, np.inf, (8,), np.float32)
        assert env.action_space == spaces.Discrete(3)
        check_env(env, skip_render_check=True)
        obs, _ = env.reset(seed=3)
        for k in range(25):  # past an episode's end (20 steps)
            assert obs.shape == (8,) and obs.dtype == np.float32 and env.observation_space.contains(obs)
            assert env.action_masks().tolist() == [True, True, True]
            obs, rew, term, trunc, info = env.step(k % 3)
            # the null game's globals: ((step + g) % 7) / 4, step counted within the episode
            assert obs.tolist() == [((info["step"] + g) % 7) * 0.25 for g in range(8)]
            if term or trunc:
                obs, _ = env.reset()
        sup = env.env.run.thread.sup
        assert sup.table.row_size == 4096 and sup.table.rows.dtype == lay.row_dtype
        start = [json.loads(x) for x in (sup.run_dir / "events.jsonl").read_text().splitlines()
                 if '"run_start"' in x][0]
        assert start["row_bytes"] == 4096 and start["row_shape"] == [0, 0, 8, 1, 3]
    finally:
        env.close()


def test_the_run_says_its_rows_size_at_start(tmp_path, null_native):
    out = subprocess.run([sys.executable, "-m", "w3async", "run", flat8_toml(tmp_path, seconds=1),
                          "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("w3async: flat8's rows of 4096 bytes (163 used): 0 entities x 0 features, 8 globals, "
            "1 action head of up to 3 choices") in out.stderr


async def test_a_network_learns_on_rows_of_the_games_shape(tmp_path, null_native):
    """W3N_LEARN shows a target 0..3 in globals 2..5; with one head of 3 choices the
    targets 0..2 are reachable: the network built from the spec trains on 8-float rows
    and its episodes are tallied."""
    from tests.learn.test_training import SMALL_NET

    path = flat8_toml(tmp_path, policy="network", seconds=120, more=f'''
[network]
{chr(10).join(f"{k} = {json.dumps(v)}" for k, v in SMALL_NET.items())}
[learner]
lr = 3e-3
num_threads = 1
[trajectories]
seq_len = 8
seqs_per_batch = 8
''')
    data = load_recipe(path, ['games.env.W3N_LEARN="1"', "games.lanes=4", "stop.updates=3"])
    run = tmp_path / "run"
    sup = compose.supervisor(data, run)
    stats = await sup.run()
    assert stats["bad_rows"] == 0 and stats["restarts"] == {}
    net = sup.answerer.engine.nets[0]
    assert net.ent_in is None and net.glob_in.in_features == 8 and net.heads.out_features == 3
    updates = [json.loads(x) for x in (run / "learner.jsonl").read_text().splitlines() if '"update"' in x]
    assert len(updates) >= 3
    eps = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "episode" for e in eps)


def test_eight_heads_of_different_sizes_and_no_globals(tmp_path, null_native):
    """A Dict without `glob`, MultiDiscrete of the eight sizes; a random policy's answers
    reach the game within each head's size."""
    import w3async.env as we

    spec = {"entities": 5, "features": 7, "globals": 0, "n_types": 8, "head_sizes": [2, 3, 4, 5, 6, 7, 8, 200]}
    r = recipe_from_dict({"name": "wide", "game": "wide", "spec": spec,
                          "games": [{"binary": str(NULL), "count": 1, "lanes": 2, "env": {"W3N_CHECK": "0"}}],
                          "supervisor": {"policy": "random"}, "status": {"enabled": False}})
    env = we.make(r)
    try:
        space = env.single_observation_space
        assert set(space) == {"ent", "ent_type", "n_ent", "mask"}
        assert space["ent"].shape == (5, 7) and space["mask"].shape == (8, 200)
        assert env.single_action_space == spaces.MultiDiscrete([2, 3, 4, 5, 6, 7, 8, 200])
        obs, _ = env.reset(seed=1)
        for _ in range(5):
            assert env.observation_space.contains(obs)
            obs, *_ = env.step(env.action_space.sample(mask=None))
        assert env.run.thread.sup.table.row_size == 4096
    finally:
        env.close()


async def test_a_game_written_for_another_shape_is_stopped_naming_both(tmp_path):
    """The duel writes the default row: under a spec of another shape it exits
    W3S_EXIT_LAYOUT at once, its log naming both shapes, and the slot fails (a restart
    would meet the same)."""
    r = recipe_from_dict({"name": "duelish", "game": "duelish", "spec": {"head_sizes": [4, 39, 4, 160]},
                          "games": [{"binary": str(REPO / "build" / "native" / "duel"), "count": 1, "lanes": 1,
                                     "sides": 2}],
                          "supervisor": {"policy": "random", "progress_s": 0}, "status": {"enabled": False},
                          "stop": {"seconds": 30}})
    assert games.get("duelish").spec.layout.head_max == 160  # the default's is 192
    run = tmp_path / "run"
    with pytest.raises(RunError, match="every game slot failed.* this game writes 160 x 16, 32 globals, 4 heads of 192"):
        await compose.supervisor(r, run).run()
    log = (run / "games" / "slot-0.log").read_text()
    assert ("the run's rows are 160 entities x 16 features, 32 globals, 4 heads of 160 choices; this game writes "
            "160 x 16, 32 globals, 4 heads of 192") in log
    ev = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    exits = [e for e in ev if e["event"] == "game_exit"]
    assert exits and all(e["returncode"] == layout.EXIT_LAYOUT for e in exits), exits
    assert [e["slot"] for e in ev if e["event"] == "slot_failed"] == [0]


@pytest.mark.parametrize("spec, said", [
    ({"entities": 4, "features": 0}, "features = 0: must be 1..1024"),
    ({"entities": 0, "globals": 0, "head_sizes": [3]}, "entities = 0 and globals = 0"),
    ({"entities": 0, "globals": 4, "head_sizes": [3], "pointer_head": 0}, "a pointer head needs entities = 0"),
    ({"entities": 8, "head_sizes": [3, 4], "pointer_head": 1}, "head 1 has 4 choices; a pointer head needs "
                                                               "entities = 8"),
    ({"head_sizes": []}, "must hold 1 to 8 sizes"),
    ({"head_sizes": [3], "noop": [0, 0]}, "must give, per head, a choice under its size or -1 (none): 1 values"),
    ({"entities": 4096, "features": 1024}, "bytes: more than"),
])
def test_a_shape_mistake_is_named_before_anything_starts(spec, said):
    with pytest.raises(RecipeError) as e:
        recipe_from_dict({"name": "bad", "game": "badshape", "spec": spec,
                          "games": [{"binary": str(NULL), "count": 1, "lanes": 1}]})
    assert any(said in p for p in e.value.problems), e.value.problems
