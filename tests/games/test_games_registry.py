"""The games registry: lookups, the duel's and null's entries, and a third game defined
in the tests folder alone (tests/games/third.py) run through the real supervisor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from w3async import games, replay_parity
from w3async.games.duel.spec import DUEL_SPEC
from w3async.games.null import NULL_SPEC
from w3async.observe.replay_view import ReplayError, replay_view
from w3async.observe.series import RunSeries
from w3async.recipes import RecipeError, load_recipe, recipe_from_dict
from w3async import compose

from tests.games import third


@pytest.fixture
def third_game():
    games.register(third.GAME)
    yield third.GAME
    games.unregister("third")


def events(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]


def test_duel_and_null_are_registered():
    assert {"duel", "null"} <= set(games.names())
    assert games.get("null").spec is NULL_SPEC and games.get("duel").spec is DUEL_SPEC
    assert "duel" in games.NAMES and "nope" not in games.NAMES and set(games.NAMES) == set(games.names())


def test_an_unknown_game_lists_the_known_ones():
    with pytest.raises(games.UnknownGame) as e:
        games.get("chess")
    msg = str(e.value)
    assert "'chess'" in msg and "'duel'" in msg and "'null'" in msg


def test_a_taken_name_is_refused_and_the_same_game_is_welcome(third_game):
    assert games.register(third_game) is third_game  # again: nothing changes
    with pytest.raises(ValueError, match="already registered"):
        games.register(games.Game(name="duel", spec=NULL_SPEC))
    assert games.get("duel").spec is DUEL_SPEC
    with pytest.raises(ValueError, match="identifier"):
        games.Game(name="no spaces", spec=NULL_SPEC)


def test_the_duel_labels_its_opponents_from_w3d_sides():
    duel = games.get("duel")
    assert duel.opponent_of({"W3D_SIDES": "agent,ai:easy"}) == "ai:easy"
    assert duel.opponent_of({"W3D_SIDES": " agent , ai:hard "}) == "ai:hard"
    assert duel.opponent_of({"W3D_SIDES": "agent,agent"}) == "self"
    assert duel.opponent_of({}) == "self"
    assert games.get("null").opponent_of({"W3D_SIDES": "agent,ai:easy"}) == "self"  # not the null game's variable


def test_evaluation_levels_come_from_the_games(third_game):
    assert games.get("duel").eval_levels == ("ai:easy", "ai:normal", "ai:hard")
    assert games.get("null").eval_levels == ()
    assert games.eval_levels()[:3] == ("ai:easy", "ai:normal", "ai:hard") and "third:bot" in games.eval_levels()
    s = RunSeries(levels=third_game.eval_levels)
    s.add_episode(1000.0, "third:bot", True, "win")
    s.add_episode(1001.0, "ai:easy", True, "win")  # not this run's level: an episode, not a win rate
    assert s.evaluation() == {"third:bot": s.levels["third:bot"].as_dict()} and s.evaluation()["third:bot"]["wins"] == 1
    assert [line["label"] for line in s.plots()["win_rate"]] == ["third:bot", "third:bot decisive"]


def test_a_recipe_names_a_registered_game_only(third_game):
    assert recipe_from_dict({"game": "third"}).game == "third"
    games.unregister("third")
    with pytest.raises(RecipeError, match="'third'"):
        recipe_from_dict({"game": "third"})
    games.register(third_game)


def test_replays_go_to_the_game_that_reads_them(tmp_path):
    with pytest.raises(ReplayError, match="no game's viewer reads it"):
        (tmp_path / "x.rec").write_bytes(b"not a replay of any game")
        replay_view(tmp_path / "x.rec")
    with pytest.raises(ReplayError, match="magic|header|truncated"):  # the duel's magic: the duel's reader says why
        (tmp_path / "y.rec").write_bytes(b"W3DREPL1 broken")
        replay_view(tmp_path / "y.rec")
    with pytest.raises(ReplayError, match="missing.rec"):
        replay_view(tmp_path / "missing.rec")


def test_the_parity_entry_dispatches_by_game(tmp_path, capsys):
    assert replay_parity.main(["--game", "chess", "r.w3dr"]) == replay_parity.EXIT_BROKEN
    assert "unknown game 'chess'" in capsys.readouterr().err
    assert replay_parity.main(["--game", "null", "r.w3dr"]) == replay_parity.EXIT_BROKEN
    assert "no parity tool" in capsys.readouterr().err
    assert replay_parity.tool_for(None).__name__ == games.get("duel").parity  # the one game that has one
    bad = tmp_path / "bad.w3dr"
    bad.write_bytes(b"not a replay")
    assert replay_parity.main(["--game", "duel", str(bad), "--native-exe", "/bin/true"]) == replay_parity.EXIT_BROKEN
    assert "cannot load" in capsys.readouterr().out


def third_recipe(binary: Path, types: int, seconds: float) -> dict:
    return {"name": "third-test", "game": "third",
            "games": [{"binary": str(binary), "count": 2, "lanes": 2,
                       "env": {"W3N_TYPES": str(types), "W3N_CHECK": "1", "THIRD_OPPONENT": "bot"}}],
            "supervisor": {"policy": "check", "progress_s": 0, "backoff_s": 0.05, "backoff_max_s": 0.2,
                           "restart_budget": 1000, "max_start_failures": 1000},  # (8 types: a bad row every start)
            "stop": {"seconds": seconds}}


async def test_a_third_game_from_the_tests_folder_runs_through_the_supervisor(tmp_path, null_native, third_game):
    """The third game's spec is the one in force: its 4 type ids pass the row checks
    where the null game's binary posts 4 types, and the null game's 8 do not."""
    run = tmp_path / "run"
    sup = compose.supervisor(recipe_from_dict(third_recipe(null_native, types=4, seconds=3)), run)
    stats = await sup.run()
    assert sup.spec is third.THIRD_SPEC
    assert stats["agent_steps"] > 0 and stats["bad_rows"] == 0 and stats["restarts"] == {}
    ev = events(run)
    assert [e["event"] for e in ev if e["event"] == "shutdown"] == ["shutdown"]
    shutdown = [e for e in ev if e["event"] == "shutdown"][0]
    assert shutdown["leftovers"]["processes"] == []
    assert json.loads((run / "recipe.json").read_text())["game"] == "third"
    logs = [x for p in (run / "games").glob("slot-*.log") for x in p.read_text().splitlines()]
    assert not [x for x in logs if "answer check failed" in x]

    run8 = tmp_path / "run8"
    stats = await compose.supervisor(recipe_from_dict(third_recipe(null_native, types=8, seconds=2)), run8).run()
    bad = [e for e in events(run8) if e["event"] == "bad_row"]
    assert stats["bad_rows"] > 0 and bad and all(e["field"] == "ent_type" for e in bad), bad[:3]


# ---- a game declared by its recipe ([spec], spec = "FILE.toml") ----------------------------

MINE = {"n_types": 4, "head_sizes": [16, 16, 16, 160], "pointer_head": 3, "noop": [0, -1, -1, -1],
        "opponent_env": "MINE_OPPONENT", "seed_env": "MINE_SEED", "result": "sign", "draw_within": 0.1,
        "levels": {"bot:easy": {"env": {"MINE_LEVEL": "1"}},
                   "bot:hard": {"env": {"MINE_LEVEL": "3"}, "args": ["-level", "3", "-seed", "{eval_seed}"]}}}


def mine_recipe(binary: Path, seconds: float, **top) -> dict:
    d = third_recipe(binary, types=4, seconds=seconds)
    d.update({"name": "mine-test", "game": "mine", "spec": json.loads(json.dumps(MINE)), **top})
    d["games"][0]["env"] = {"W3N_TYPES": "4", "W3N_CHECK": "1"}
    return d


def test_a_declared_game_labels_levels_and_results(null_native):
    r = recipe_from_dict(mine_recipe(null_native, 1))
    mine = games.get("mine")
    assert r.game == "mine" and games.is_declared("mine") and mine.spec.name == "mine"
    assert (mine.spec.n_types, mine.spec.head_sizes, mine.spec.pointer_head, mine.spec.noop) == \
        (4, (16, 16, 16, 160), 3, (0, None, None, None))
    assert mine.opponent_of({"MINE_OPPONENT": " bot:hard "}) == "bot:hard" and mine.opponent_of({}) == "self"
    assert mine.eval_levels == ("bot:easy", "bot:hard")
    assert mine.eval_env({"A": "1"}, "bot:easy", 7) == {"A": "1", "MINE_OPPONENT": "bot:easy", "MINE_SEED": "7",
                                                        "MINE_LEVEL": "1"}
    assert mine.eval_args(["x"], "bot:hard", 7) == ["-level", "3", "-seed", "7"]
    assert mine.eval_args(["x"], "bot:easy", 7) == ["x"]
    assert [mine.result_of(x, {}) for x in (0.5, 0.05, -0.1, -2.0)] == ["win", "draw", "draw", "loss"]
    near = recipe_from_dict(mine_recipe(null_native, 1, spec={"result": "nearest", "win_reward": 10.0,
                                                                "loss_reward": -10.0, "draw_reward": -1.0}))
    assert near.spec.result == "nearest" and games.get("mine").spec.n_types == 8  # the last declaration wins
    assert [games.get("mine").result_of(x, {}) for x in (6.0, -0.2, -6.0)] == ["win", "draw", "loss"]
    # a recipe without its [spec] may not borrow a declared game; a declared one may not take a registered name
    with pytest.raises(RecipeError, match="declared by a recipe's \\[spec\\]; this recipe has none"):
        recipe_from_dict({"game": "mine"})
    with pytest.raises(RecipeError, match="game = 'duel': a registered game"):
        recipe_from_dict(mine_recipe(null_native, 1, game="duel"))
    games.unregister("mine")


def test_a_spec_file_beside_the_recipe_and_every_problem_at_once(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "mine.toml").write_text('n_types = 4\nhead_sizes = [8, 8, 8, 160]\npointer_head = 3\n'
                                                  '[levels."bot:easy"]\nenv = { L = "1" }\n')
    rec = tmp_path / "r.toml"
    rec.write_text('game = "mine"\nspec = "specs/mine.toml"\n')
    r = load_recipe(rec, ["spec.n_types=5", 'spec.levels."bot:easy".env.L=2'])
    assert r.spec.n_types == 5 and r.spec.levels["bot:easy"].env == {"L": "2"}
    assert games.get("mine").spec.head_sizes == (8, 8, 8, 160)
    (tmp_path / "specs" / "bad.toml").write_text('n_types = 0\nhead_sizes = [16, 300, 1, 1, 1, 1, 1, 1, 1]\n'
                                                 'result = "median"\ncolour = 1\n'
                                                 'noop = "x"\nreplay_view = "no_such_mod_w3:view"\nparity = "no_such_w3"\n'
                                                 '[levels.x]\nenv = { A = [1] }\n')
    with pytest.raises(RecipeError) as e:
        load_recipe(rec, ["spec=specs/bad.toml"])
    bad = str(tmp_path / "specs" / "bad.toml")
    assert sorted(e.value.problems) == sorted([
        f"{bad}: n_types = 0: must be in 1..32767",
        f"{bad}: result = 'median': must be one of 'sign', 'nearest', 'score'",
        f"{bad}: unknown key 'colour' (known: draw_reward, draw_within, entities, features, globals, head_sizes, "
        f"levels, loss_reward, n_types, noop, opponent_default, opponent_env, parity, pointer_head, replay_dir, "
        f"replay_suffixes, replay_view, result, seed_env, win_reward)",
        f"{bad}: noop = 'x': expected list, got str",
        f"{bad}: levels.x.env.A = [1]: must be a string or a number, not list",
        f"{bad}: head_sizes = [16, 300, 1, 1, 1, 1, 1, 1, 1]: must hold 1 to 8 sizes, one per action head, "
        f"each 1..65536",
        f"{bad}: replay_view = 'no_such_mod_w3:view': cannot import it: ModuleNotFoundError: "
        f"No module named 'no_such_mod_w3'",
        f"{bad}: parity = 'no_such_w3': no such module (a 'package.module' on the Python path)",
    ]), e.value.problems
    with pytest.raises(RecipeError) as e:
        load_recipe(rec, ["spec=nope.toml"])
    assert e.value.problems == [f"spec = 'nope.toml': no such file {str(tmp_path / 'nope.toml')!r} "
                                f"(a path relative to the recipe's folder)"]
    games.unregister("mine")


async def test_a_declared_game_runs_through_the_supervisor(tmp_path, null_native):
    """The declared spec is the one in force: its 4 type ids pass the row checks."""
    run = tmp_path / "run"
    sup = compose.supervisor(recipe_from_dict(mine_recipe(null_native, 2)), run)
    stats = await sup.run()
    assert sup.spec.name == "mine" and sup.spec.n_types == 4
    assert stats["agent_steps"] > 0 and stats["bad_rows"] == 0 and stats["restarts"] == {}
    saved = json.loads((run / "recipe.json").read_text())
    assert saved["game"] == "mine" and saved["spec"]["levels"]["bot:hard"]["args"][0] == "-level"
    games.unregister("mine")
    # A later reader that never loaded the recipe (`w3async status` of the finished run)
    # reads the run's levels from its recipe.json (before: every registered game's).
    from w3async.observe.run_view import RunView

    assert RunView(run).series.eval_levels == ("bot:easy", "bot:hard")


async def test_a_declared_game_trains_and_plans_its_evaluation(tmp_path, null_native):
    from w3async.learn.evaluate import plan

    from tests.learn.test_training import learn_recipe

    data = learn_recipe(count=1, stop={"updates": 2, "seconds": 120})
    data["games"][0]["env"]["W3N_TYPES"] = "4"
    data["games"].append(dict(data["games"][0], role="eval", env=dict(data["games"][0]["env"],
                                                                        MINE_OPPONENT="bot:easy")))
    data["game"], data["spec"] = "mine", json.loads(json.dumps(MINE))
    run = tmp_path / "run"
    sup = compose.supervisor(recipe_from_dict(data), run)
    await sup.run()
    eps = [json.loads(x) for x in (run / "episodes.jsonl").read_text().splitlines()]
    assert {e.get("opponent") for e in eps if e.get("event") == "episode"} >= {"self", "bot:easy"}
    assert [json.loads(x) for x in (run / "learner.jsonl").read_text().splitlines() if '"update"' in x]
    recipe = recipe_from_dict(data)
    recipe.games[1].inject = None
    planned, levels = plan(recipe, ["bot:easy", "bot:hard"], 4, 1, 11, {})
    assert levels == ["bot:easy", "bot:hard"] and planned["spec"]["n_types"] == 4
    assert [g["env"]["MINE_OPPONENT"] for g in planned["games"]] == ["bot:easy", "bot:hard"]
    assert [g["env"]["MINE_SEED"] for g in planned["games"]] == ["11", "11"]
    assert recipe_from_dict(planned).game == "mine"
    games.unregister("mine")
