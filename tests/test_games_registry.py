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
from w3async.recipes import RecipeError, recipe_from_dict
from w3async.runtime.supervisor import Supervisor

from .games import third


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
    assert s.evaluation() == {"third:bot": s.levels["third:bot"].as_dict()} and s.levels["third:bot"].wins == 1
    assert [line["label"] for line in s.plots()["win_rate"]] == ["third:bot"]


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
                           "restart_budget": 1000},
            "stop": {"seconds": seconds}}


async def test_a_third_game_from_the_tests_folder_runs_through_the_supervisor(tmp_path, null_native, third_game):
    """The third game's spec is the one in force: its 4 type ids pass the row checks
    where the null game's binary posts 4 types, and the null game's 8 do not."""
    run = tmp_path / "run"
    sup = Supervisor(recipe_from_dict(third_recipe(null_native, types=4, seconds=3)), run)
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
    stats = await Supervisor(recipe_from_dict(third_recipe(null_native, types=8, seconds=2)), run8).run()
    bad = [e for e in events(run8) if e["event"] == "bad_row"]
    assert stats["bad_rows"] > 0 and bad and all(e["field"] == "ent_type" for e in bad), bad[:3]
