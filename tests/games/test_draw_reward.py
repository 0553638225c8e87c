"""W3D_DRAW_REWARD and W3D_TIME_LIMIT_WIN: how the duel scores a draw (both sides), read
back as a draw, and a win the time limit's tie-break decided.

Self-play of a tiny network with a time limit of 3 steps: nothing can be destroyed or
killed in that time, so every game is a draw at the time limit (equal bases, equal
kills). With the default a draw is worth 0, as before; with W3D_DRAW_REWARD=-0.5 each
side gets -0.5 on the DONE row and episodes.jsonl still says "draw". With -1 (a draw
scored as a loss for both) the reward alone reads as a loss: the tally sees both sides
of the lane lose and writes "draw" for both. With -2 (a draw worse than a loss)
it is a draw again."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from w3async import compose
from w3async.games.duel import result_of
from w3async.recipes import recipe_from_dict
from w3async.sync import layout

from tests.conftest import REPO
from tests.learn.test_training import run

DUEL = REPO / "build" / "native" / "duel"


@pytest.fixture(scope="module")
def duel():
    subprocess.run(["make", "-s", "-C", "games/duel", "native", f"BUILD={REPO / 'build'}"], cwd=REPO, check=True)
    return DUEL


def selfplay_recipe(draw: str | None) -> dict:
    env = {"W3D_SIDES": "agent,agent", "W3D_REWARD": "win", "W3D_TIME_LIMIT": "60"}
    if draw is not None:
        env["W3D_DRAW_REWARD"] = draw
    return {"name": "draws", "game": "duel",
            "games": [{"binary": str(DUEL), "count": 1, "lanes": 2, "sides": 2, "nice": 0, "env": env}],
            "supervisor": {"policy": "network", "progress_s": 0},
            "network": {"d_model": 16, "n_heads": 2, "n_layers": 1},
            "trajectories": {"seq_len": 4, "seqs_per_batch": 4}, "stop": {"seconds": 3}}


@pytest.mark.parametrize("draw, expect", [(None, 0.0), ("-0.5", -0.5), ("-1", -1.0), ("-2", -2.0)])
async def test_a_draw_at_the_time_limit_is_scored_as_set(tmp_path, duel, draw, expect):
    await run(selfplay_recipe(draw), tmp_path / "run")
    eps = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    eps = [e for e in eps if e["event"] == "episode"]
    assert len(eps) >= 4, eps
    assert {e["result"] for e in eps} == {"draw"}
    assert {e["return"] for e in eps} == {expect}  # win rewards: the DONE row's only


def test_a_bad_draw_reward_is_named(duel):
    p = subprocess.run([str(duel)], env={**os.environ, "W3D_SIDES": "agent,ai:easy", "W3D_DRAW_REWARD": "-2.5"},
                       capture_output=True, text=True)
    assert p.returncode == layout.EXIT_ATTACH and "W3D_DRAW_REWARD=-2.5: must be a number in -2..1" in p.stderr, p.stderr


def test_outcomes_read_with_a_draw_reward():
    env = {"W3D_DRAW_REWARD": "-0.5"}
    assert [result_of(r, env) for r in (1.1, 0.9, -1.05, -0.45, -0.6, -0.8)] == \
        ["win", "win", "loss", "draw", "draw", "loss"]
    assert [result_of(r, {}) for r in (0.01, 0.0, -0.3)] == ["win", "draw", "loss"]  # unset: the sign, as before


async def test_a_win_at_the_time_limit_is_worth_what_w3d_time_limit_win_says(tmp_path, duel):
    """W3D_TIME_LIMIT_WIN=0.5: a game the tie-break decides (600 turns: no base falls, units
    do) ends with +0.5 for its winner and -0.5 for its loser, still read as a win and a
    loss, and marked `end: time_limit` (a decisive one would stay at 1); a bad value is
    named."""
    env = {"W3D_SIDES": "agent,ai:easy", "W3D_REWARD": "win", "W3D_TIME_LIMIT": "600", "W3D_TIME_LIMIT_WIN": "0.5"}
    data = {"name": "tlw", "game": "duel", "supervisor": {"policy": "random", "progress_s": 0},
            "games": [{"binary": str(DUEL), "count": 1, "lanes": 4, "sides": 1, "env": env}], "stop": {"seconds": 3}}
    await compose.supervisor(recipe_from_dict(data), tmp_path / "run").run()
    eps = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    eps = [e for e in eps if e["event"] == "episode" and e["result"] != "truncated"]
    assert len(eps) >= 4 and "time_limit" in {e["end"] for e in eps}, eps[:3]
    scale = {"time_limit": 0.5, "decisive": 1.0}
    expect = {"win": 1.0, "loss": -1.0, "draw": 0.0}
    assert all(e["return"] == expect[e["result"]] * scale[e["end"]] for e in eps), eps
    assert {e["result"] for e in eps if e["end"] == "time_limit"} & {"win", "loss"}, eps
    p = subprocess.run([str(duel)], env={**os.environ, "W3D_SIDES": "agent,ai:easy", "W3D_TIME_LIMIT_WIN": "0.1"},
                       capture_output=True, text=True)
    assert p.returncode == layout.EXIT_ATTACH and "W3D_TIME_LIMIT_WIN=0.1: must be a number in 0.25..1" in p.stderr
