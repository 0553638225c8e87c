"""The games registry: everything the harness knows about a game, in one entry per game.

    from w3async import games
    g = games.get("duel")          # a Game; an unknown name lists the known ones
    g.spec                          # GameSpec: type ids, action heads (the network sizes itself)
    g.opponent_of(group.env)        # "ai:easy", "self", ...: the label of a group's second side
    g.result_of(reward, group.env)  # an ended episode's "win", "loss" or "draw"
    g.eval_levels                   # the evaluation opponents' labels, in the plots' order
    g.eval_env(env, level, seed)    # a group's env made to play that level at fixed seeds
    g.replay_dir, g.replay_view     # where a run's replays are, the dashboard viewer's JSON of one
    g.row_view                      # one row's observation as the viewer's JSON (the env's render())
    g.parity                        # the replay parity tool's module, or None

The core (supervisor, training, status, series, recipes) asks the registry and holds
no game's name. A game is a module or package in this folder (games/NAME.py or
games/NAME/) that defines `GAME = Game(...)`: it is found on the first lookup, with no
edit of the core. A game that lives elsewhere (a test, a user's package) calls
`register(game)` before its recipe is loaded; a recipe may declare its own game in a
[spec] table (recipes/spec.py builds it, `declare` adds it). How to add one: docs/games.md.

Imports: this package may import w3async.sync (the layout) and nothing else of
w3async; the core imports it.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from w3async.games.spec import GameSpec


def sign_result(reward: float, env: dict) -> str:
    """An episode's result from its last reward's sign: win, loss, or draw for 0."""
    return "win" if reward > 0 else "loss" if reward < 0 else "draw"


def no_opponent(env: dict) -> str:
    """For a game without configured opponents: every group plays itself."""
    return "self"


@dataclass(frozen=True)
class Game:
    """One game as the harness sees it."""

    name: str
    """The recipe's `game` value."""
    spec: GameSpec
    """The part of the table the game uses (type ids, action heads)."""
    opponent_of: Callable[[dict], str] = no_opponent
    """A group's environment -> the label of its second side ("self" for self-play):
    the label episodes.jsonl records and evaluation tallies group by."""
    eval_levels: tuple[str, ...] = ()
    """Labels of the fixed evaluation opponents, in the order the dashboard plots them."""
    replay_dir: str | None = None
    """The run-folder-relative folder where the game's recorded replays land (None: it
    records none)."""
    replay_suffixes: tuple[str, ...] = (".json",)
    """Names of finished replay files in replay_dir (a `.json` file is the viewer's own format)."""
    replay_view: Callable[[Path], dict | None] | None = None
    """A replay file -> the viewer's JSON (w3async.observe.replay_view), or None when the
    file is not this game's. Raises ValueError/OSError for a file of this game that is broken."""
    row_view: Callable[[dict], dict] | None = None
    """One row's observation (glob, ent, ent_type, n_ent, mask of one sub-env) -> the
    viewer's JSON of that one moment (a replay_view of one step), what the env's
    render() draws; None: the game draws no observation (render_mode "rgb_array" is
    refused for it)."""
    result_of: Callable[[float, dict], str] = sign_result
    """(the last reward of an episode that ended, the group's environment) -> "win",
    "loss" or "draw" (or "none" for a game scored by points): how episodes.jsonl and the
    evaluation tallies read an outcome."""
    scored_by: str = "outcome"
    """What its evaluation and best.pt go by: "outcome" (the win rate's score,
    w3async/outcomes.py) or "return" (a game with no winner, scored by points: the mean
    return of each level's last window of episodes; its episodes' result is "none")."""
    eval_env: Callable[[dict, str, int], dict] | None = None
    """(a group's environment, an evaluation level, a base seed) -> the environment of a
    group that plays that level at fixed seeds (`python -m w3async eval`); None: the game
    cannot make one (eval then plays only the levels of the checkpoint's eval groups)."""
    eval_args: Callable[[list[str], str, int], list[str]] | None = None
    """(an injected group's args, an evaluation level, a base seed) -> the args of a
    group that plays that level ([games.inject] args; None: the group's own)."""
    parity: str | None = None
    """The module of the game's replay parity tool (`python -m w3async.replay_parity`
    dispatches to it; docs/games.md says what it provides), or None."""

    def __post_init__(self) -> None:
        if not self.name or not self.name.isidentifier():
            raise ValueError(f"game name {self.name!r}: must be a non-empty identifier")
        if not isinstance(self.spec, GameSpec):
            raise TypeError(f"game {self.name!r}: spec must be a GameSpec, not {type(self.spec).__name__}")
        if len(set(self.eval_levels)) != len(self.eval_levels):
            raise ValueError(f"game {self.name!r}: eval_levels {self.eval_levels} repeat a label")


class UnknownGame(KeyError):
    """A game name the registry does not hold."""

    def __str__(self) -> str:  # KeyError's own str() quotes the whole message
        return str(self.args[0])


_GAMES: dict[str, Game] = {}
_DECLARED: set[str] = set()  # names of games a recipe declared (declare), not a module
_found = False


def _discover() -> None:
    """Registers the GAME of every module and package in this folder (once)."""
    global _found
    if _found:
        return
    _found = True
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        game = getattr(mod, "GAME", None)
        if isinstance(game, Game):
            register(game)


def register(game: Game) -> Game:
    """Adds a game (again with the same object: nothing changes). Another game under a
    taken name is refused."""
    if not isinstance(game, Game):
        raise TypeError(f"register: a Game is needed, not {type(game).__name__}")
    _discover()
    old = _GAMES.get(game.name)
    if old is not None and old is not game:
        raise ValueError(f"game {game.name!r} is already registered: another game needs another name")
    _GAMES[game.name] = game
    return game


def declare(game: Game) -> Game:
    """Adds a game a recipe declared ([spec]), replacing the last declaration of that
    name (a process may load a recipe again, or several of one game: the last wins). A
    name of a game registered by a module or register() is refused."""
    if not isinstance(game, Game):
        raise TypeError(f"declare: a Game is needed, not {type(game).__name__}")
    _discover()
    if game.name in _GAMES and game.name not in _DECLARED:
        raise ValueError(f"game {game.name!r} is a registered game: a declared one needs another name")
    _GAMES[game.name] = game
    _DECLARED.add(game.name)
    return game


def is_declared(name: str) -> bool:
    """Was the game of this name declared by a recipe (not registered by a module)?"""
    return name in _DECLARED


def unregister(name: str) -> None:
    """Removes a registered game (for tests that add one for a while)."""
    _GAMES.pop(name, None)
    _DECLARED.discard(name)


def get(name: str) -> Game:
    _discover()
    try:
        return _GAMES[name]
    except KeyError:
        raise UnknownGame(f"unknown game {name!r}: the registered games are {', '.join(map(repr, names()))} "
                          f"(a new game: docs/games.md)") from None


def names() -> tuple[str, ...]:
    """The registered games' names, in registration order."""
    _discover()
    return tuple(_GAMES)


def all_games() -> tuple[Game, ...]:
    _discover()
    return tuple(_GAMES.values())


def eval_levels() -> tuple[str, ...]:
    """Every registered game's evaluation levels, each once, in registration order: the
    dashboard's lines when a run's game is not known."""
    out: dict[str, None] = {}
    for g in all_games():
        out.update(dict.fromkeys(g.eval_levels))
    return tuple(out)


class _Names:
    """The registered names as a live, read-only collection (`"duel" in NAMES`): a
    validator built at import time still sees games registered later."""

    def __contains__(self, name: object) -> bool:
        return name in names()

    def __iter__(self):
        return iter(names())

    def __len__(self) -> int:
        return len(names())

    def __repr__(self) -> str:
        return f"games.NAMES{names()!r}"


NAMES = _Names()
