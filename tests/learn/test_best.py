"""best.pt: the rule (full windows, the mean over levels, Wilson intervals), the keeper
(only a better score replaces it, across a resume), and a run that keeps it and shows it
in /status."""

from __future__ import annotations

import collections
import hashlib
import json

import pytest
import torch

from w3async.learn import best as bestmod
from w3async.learn.best import BestKeeper, score, wilson
from w3async.learn.checkpoint import CheckpointLoadError, load_checkpoint, save_best
from w3async.observe.run_view import RunView

from tests.learn.test_checkpoint import trained
from tests.learn.test_training import learn_recipe, lines, run

torch.set_num_threads(1)


def test_wilson_matches_hand_computed_values():
    # p = 0.5, n = 10: centre 0.5, half 1.96 * sqrt(0.025 + 0.0096) / 1.384 = 0.2634
    assert wilson(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert wilson(0, 10) == pytest.approx((0.0, 0.27754), abs=1e-5)  # not empty at 0 wins
    assert wilson(10, 10) == pytest.approx((0.72246, 1.0), abs=1e-5)
    assert wilson(0, 0) == (0.0, 1.0)


def test_the_score_needs_every_level_full_and_is_their_mean():
    w = {"ai:easy": collections.deque(["win"] * 3 + ["loss"], maxlen=4)}
    assert score(w, ("ai:easy", "ai:normal"), 4) is None  # normal has no games yet
    w["ai:normal"] = collections.deque(["win", "draw", "truncated"], maxlen=4)
    assert score(w, ("ai:easy", "ai:normal"), 4) is None  # nor a full window
    w["ai:normal"].append("loss")
    s = score(w, ("ai:easy", "ai:normal"), 4)
    assert s["score"] == pytest.approx((0.75 + 1 / 3) / 2, abs=1e-4)  # a truncated game is no game
    e, n = s["levels"]["ai:easy"], s["levels"]["ai:normal"]
    assert (e["games"], e["wins"], e["losses"], e["draws"]) == (4, 3, 1, 0)
    assert (n["games"], n["wins"], n["losses"], n["draws"], n["truncated"]) == (3, 1, 1, 1, 1)  # a draw is not a win
    assert (e["lo"], e["hi"]) == pytest.approx(wilson(3, 4), abs=1e-4)
    assert (s["games"], s["wins"]) == (7, 4) and (s["lo"], s["hi"]) == pytest.approx(wilson(4, 7), abs=1e-4)
    assert score(w, (), 4) is None


def test_a_decisive_win_scores_above_a_win_at_the_time_limit():
    """Two policies with the same win rate: the one that wins outright is the better
    (outcomes.py: a win on the tie-break counts half in the score), and each level's
    record splits the wins and the losses by kind, with the decisive rate's interval."""
    outright = {"ai:easy": ["win", "win", "win:time_limit", "loss"]}
    pokes = {"ai:easy": ["win:time_limit", "win:time_limit", "win", "loss:time_limit"]}
    a, b = score(outright, ("ai:easy",), 4), score(pokes, ("ai:easy",), 4)
    assert a["levels"]["ai:easy"]["win_rate"] == b["levels"]["ai:easy"]["win_rate"] == 0.75
    assert a["score"] == pytest.approx((2 + 0.5) / 4) and b["score"] == pytest.approx((1 + 1.0) / 4)
    assert a["score"] > b["score"] and (a["decisive_wins"], b["decisive_wins"]) == (2, 1)
    r = b["levels"]["ai:easy"]
    assert (r["decisive_wins"], r["time_limit_wins"], r["losses"], r["time_limit_losses"]) == (1, 2, 1, 1)
    assert r["decisive_rate"] == 0.25 and (r["decisive_lo"], r["decisive_hi"]) == pytest.approx(wilson(1, 4), abs=1e-4)
    keeper = BestKeeper(".", ("ai:easy",), 4)
    keeper.best = dict(b, updates=1)
    assert keeper.candidate(outright, 2, 20) is not None  # the outright winner replaces the poker
    keeper.best = dict(a, updates=1)
    assert keeper.candidate(pokes, 2, 20) is None


def test_only_a_better_score_replaces_best_and_survives_a_resume(tmp_path):
    learner, league = trained(tmp_path)
    keeper = BestKeeper(tmp_path, ("ai:easy",), 2)
    assert keeper.load() is None
    assert keeper.candidate({"ai:easy": ["win"]}, 1, 10) is None  # not a full window
    rec = keeper.candidate({"ai:easy": ["win", "loss"]}, 2, 20)
    assert rec["score"] == 0.5 and rec["updates"] == 2 and rec["previous_score"] is None
    save_best(tmp_path, learner=learner.state_dict(), counters={}, league=league.state_dict(), recipe={}, best=rec)
    keeper.accept(rec)
    shown = json.loads((tmp_path / "checkpoints" / "best.json").read_text())
    assert shown["score"] == 0.5 and shown["path"].endswith("best.pt")
    assert keeper.candidate({"ai:easy": ["loss", "win"]}, 3, 30) is None  # equal: the older one stays
    assert keeper.candidate({"ai:easy": ["win", "win"]}, 4, 40)["previous_score"] == 0.5
    # a resumed run: the best so far comes from best.pt, and a worse policy does not replace it
    again = BestKeeper(tmp_path, ("ai:easy",), 2)
    assert again.load()["score"] == 0.5
    assert again.candidate({"ai:easy": ["loss", "loss"]}, 5, 50) is None
    ck = load_checkpoint(tmp_path / "checkpoints" / "best.pt")
    assert ck["best"]["updates"] == 2 and ck["learner"]["version"] == learner.version


def test_a_best_pt_that_does_not_load_stops_the_resume(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointLoadError, match="best.pt"):
        BestKeeper(tmp_path, ("ai:easy",), 2).load()


def eval_recipe(**stop):
    """The null game's bandit with an evaluation group (label "self"), windows of 4 games."""
    data = learn_recipe(count=2, lanes=2, stop=stop, evaluation={"window": 4}, checkpoint={"every_updates": 1})
    ev = dict(data["games"][0], count=1, role="eval", env=dict(data["games"][0]["env"], W3N_EPISODE_STEPS="8"))
    data["games"].append(ev)
    return data


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_run_keeps_best_pt_shows_it_and_a_resume_keeps_a_better_one(tmp_path, null_native):
    run_dir = tmp_path / "run"
    await run(eval_recipe(updates=4, seconds=90), run_dir)
    ck = run_dir / "checkpoints"
    assert (ck / "best.pt").exists(), lines(run_dir / "episodes.jsonl", "evaluation")[-2:]
    rec = load_checkpoint(ck / "best.pt")["best"]
    assert rec["levels"]["self"]["games"] == 4 and 0 <= rec["lo"] <= rec["score"] <= rec["hi"] <= 1
    evals = lines(run_dir / "episodes.jsonl", "evaluation")
    assert max(e["score"] for e in evals if e["score"] is not None) == rec["score"]
    view = RunView(run_dir)
    view.refresh()
    st = view.status()["best"]
    assert st["score"] == rec["score"] and st["updates"] == rec["updates"] and st["levels"]["self"]["games"] == 4
    # best.pt with a score no policy reaches: a resumed run must leave it as it is
    sd = load_checkpoint(ck / "best.pt")
    save_best(run_dir, learner=sd["learner"], counters=sd["counters"], league=sd["league"], recipe=sd["recipe"],
              best=dict(rec, score=2.0))
    before = _sha(ck / "best.pt")
    latest = (ck / "latest").read_text()
    data = eval_recipe(updates=sd["learner"]["version"] + 3, seconds=90)
    await run(data, run_dir)
    assert (ck / "latest").read_text() != latest  # it went on from the last checkpoint
    assert _sha(ck / "best.pt") == before
    assert bestmod.BEST_JSON == "best.json" and (ck / "best.json").exists()


def test_the_live_tally_keeps_each_levels_mean_return_truncated_episodes_too():
    """A game scored by points (Snake) is read by its evaluation returns: the live tally
    (TensorBoard's eval/mean_return, the evaluation line) keeps the last window of every
    ended evaluation episode's return, cut ones too, beside the win rate of those with a
    result; training episodes stay out of it."""
    import numpy as np  # noqa: PLC0415

    from w3async.learn.tallies import EpisodeTally  # noqa: PLC0415
    from w3async.sync import layout  # noqa: PLC0415
    from w3async.sync.gather import Batch  # noqa: PLC0415

    t = EpisodeTally(n_rows=2, eval_window=2)
    t.log = type("Log", (), {"info": lambda *a, **k: None})()
    b = Batch(capacity=2)
    b.n = 2
    rows = np.arange(2)
    for ret, flags, result in [(3.0, layout.FLAG_DONE, "loss"), (5.0, layout.FLAG_TRUNCATED, "truncated"),
                               (-1.0, layout.FLAG_DONE, "loss")]:
        b.flags[:2] = layout.FLAG_FIRST
        b.reward[:2] = ret
        t.add_rewards(b, rows)
        b.flags[:2] = flags
        t.finish(0, b, 0, "solo", 0, True, 1, result)
        t.finish(1, b, 1, "solo", 0, False, 1, result)
    solo = t.win_rates()["solo"]
    assert solo["mean_return"] == 2.0 and solo["n"] == 1 and solo["rate"] == 0.0  # the window: 5 (cut) and -1
    assert t.count == 6


def test_a_game_scored_by_points_keeps_best_pt_by_its_mean_return(tmp_path):
    """A declared game with result = "score" (Snake: no winner): its episodes have no
    result, and best.pt goes by the mean over levels of each level's mean return over a
    full window; a higher mean replaces it, a full window is needed first."""
    from w3async import games
    from w3async.recipes import recipe_from_dict

    recipe_from_dict({"name": "s", "game": "scored_by_points", "spec": {"result": "score"},
                      "games": [{"binary": "build/native/null_game"}]})
    game = games.get("scored_by_points")
    assert game.scored_by == "return" and game.result_of(-1.0, {}) == "none"
    keeper = BestKeeper(tmp_path, levels=("solo",), window=3, by="return")
    assert keeper.candidate({}, 1, 10, {"solo": [1.0, 2.0]}) is None  # not a full window
    rec = keeper.candidate({}, 2, 20, {"solo": [0.0, 1.0, 2.0, 3.0]})
    assert rec["score"] == 2.0 and rec["by"] == "return" and rec["levels"]["solo"] == {"games": 3, "mean_return": 2.0}
    keeper.best = rec
    assert keeper.candidate({}, 3, 30, {"solo": [2.0, 2.0, 2.0]}) is None  # not above 2.0
    assert keeper.candidate({}, 4, 40, {"solo": [2.0, 2.0, 3.0]})["score"] == 2.3333
    assert keeper.score_now({}, {"solo": [5.0, 5.0, 5.0]}) == 5.0
