"""A game declared by the recipe itself: the [spec] table, or `spec = "FILE.toml"` (a
file of the same keys, relative to the recipe's folder), typed and validated here,
then declared in the games registry under the recipe's `game` name. docs/games.md, "A
game of your own", is the manual.

A user's game needs no Python: the table holds what the network, the checks, the
opponent labels, the evaluation levels and the result tallies read. recipes/load.py calls
`inline` (a file spec becomes its table, remembered as a SpecTable naming the file) and
`declare` (the checks across keys, then the registry entry).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Callable

from pydantic import Field
from pydantic.dataclasses import dataclass

from w3async import games
from w3async.games._declared import Level, make_game
from w3async.recipes.checks import CONFIG, Env, Float, Int, Str, choice
from w3async.sync import layout

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(config=CONFIG)
class SpecLevel:
    """One evaluation level ([spec.levels."LABEL"]): what makes a group play it."""

    env: Env = Field(default_factory=dict)
    """Environment of the level's groups, over the group's own (after opponent_env and
    seed_env are set: a level may override them)."""
    args: list[Str] | None = None
    """An injected game's command line for this level, replacing [games.inject] args
    ("{eval_seed}" becomes eval's seed; the inject placeholders still apply). Unset: the
    group's own args."""


@dataclass(config=CONFIG)
class SpecSection:
    """A game of the user's own ([spec]): the game's part of the table, how its opponents
    are labelled, its evaluation levels, how a result is read, where its replays land."""

    entities: Int = Field(layout.E_MAX, ge=0, le=layout.E_LIMIT)
    """Entities a row holds at most (its entity table's rows; 0: none, a flat observation)."""
    features: Int = Field(layout.F_ENT, ge=0, le=layout.F_LIMIT)
    """Float features of each entity."""
    globals: Int = Field(layout.G_GLOB, ge=0, le=layout.G_LIMIT)
    """Global float features of a row (the flat part of the observation)."""
    n_types: Int = Field(8, ge=1, le=32767)
    """Entity type ids are 0..n_types-1 (the network's type embedding; the row check)."""
    head_sizes: list[Int] = Field(default_factory=lambda: [16, 16, 16, layout.E_MAX])
    """Choices per action head, one size per head: 1 to 8 heads. A row's masks are
    heads x the largest size; masks past a head's size must be zero."""
    pointer_head: Int | None = None
    """A head whose choice c points at entity c of the row (its size at least `entities`);
    unset: none."""
    noop: list[Int] = Field(default_factory=list)
    """Per head, the choice that means "change nothing", -1 for a head without one ([]:
    none). A network may start biased towards it (network.noop_bias)."""
    opponent_env: Str = ""
    """The environment variable whose value labels a group's opponent ("ai:easy"): the
    label episodes.jsonl and the evaluation tallies use. "": every group is labelled
    opponent_default."""
    opponent_default: Str = "self"
    """The label of a group whose opponent_env is unset or empty ("self": self-play)."""
    levels: dict[str, SpecLevel] = Field(default_factory=dict)
    """Evaluation levels by label, in the dashboard's order: [spec.levels."ai:easy"]
    env = {...}. `python -m w3async eval` plays each (opponent_env set to the label)."""
    seed_env: Str = ""
    """The environment variable that gets eval's base seed ("": none: the game's own
    W3S_SEED, new at every start, is its only seed)."""
    result: Annotated[Str, choice(lambda: ("sign", "nearest", "score"))] = "sign"
    """How an ended episode's last reward reads: "sign" (above draw_within a win, below
    -draw_within a loss, else a draw), "nearest" (of win_reward, loss_reward, draw_reward),
    or "score": a game with no winner (Snake), scored by its return: no episode is a win
    or a loss, the evaluation reports each level's mean return and best.pt goes by it."""
    draw_within: Float = Field(0.0, ge=0)
    """"sign": a last reward within this of 0 is a draw."""
    win_reward: Float = 1.0
    """"nearest": the last reward of a won episode."""
    loss_reward: Float = -1.0
    """"nearest": the last reward of a lost one."""
    draw_reward: Float = 0.0
    """"nearest": the last reward of a drawn one."""
    replay_dir: Str = ""
    """The run-folder-relative folder the game records replays into ("": none); point
    the game's own setting at "{run_dir}/<replay_dir>"."""
    replay_suffixes: list[Str] = Field(default_factory=lambda: [".json"])
    """Finished replay files' suffixes (a .json replay is the viewer's format already)."""
    replay_view: Str = ""
    """"pkg.module:function", a replay file's Path -> the viewer's JSON (docs/games.md);
    imported when the recipe loads. "": .json replays only."""
    parity: Str = ""
    """"pkg.module", a replay parity tool (its main(argv, acquire_wine_prefix)); "": none."""


class SpecTable(dict):
    """A [spec] table read from its own file: `source` names the file for messages."""

    source: str = ""


def inline(data: dict, recipe_path: str) -> str | None:
    """`spec = "FILE.toml"` in the raw recipe -> that file's table (a SpecTable), read
    relative to the recipe's folder (the working folder for a recipe that is no file).
    The one problem that stops reading it, or None."""
    name = data.get("spec")
    if not isinstance(name, str):
        return None
    base = Path(recipe_path).parent if os.path.isfile(recipe_path) else Path.cwd()
    path = Path(name) if os.path.isabs(name) else base / name
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"spec = {name!r}: no such file {str(path)!r} (a path relative to the recipe's folder)"
    except (OSError, ValueError) as e:  # a folder, unreadable, not UTF-8, not TOML, a NUL in the name
        return f"spec = {name!r}: {path} cannot be read as TOML: {getattr(e, 'strerror', None) or e}"
    except RecursionError:
        return f"spec = {name!r}: {path} nests arrays or tables too deeply"
    data["spec"] = SpecTable(table)
    data["spec"].source = str(path)
    return None


def row_layout(s: SpecSection) -> layout.Layout | None:
    """The rows' layout the spec declares (None when its shape is out of range)."""
    sizes = s.head_sizes or [1]
    dims = (s.entities, s.features if s.entities else 0, s.globals, len(sizes), max(sizes))
    return None if layout.shape_problem(*dims) else layout.Layout(*dims)


def _head_problems(s: SpecSection, key: str) -> list[str]:
    """The checks across the spec's keys (GameSpec's), each naming the key and value."""
    out = []
    sizes = s.head_sizes
    if not 1 <= len(sizes) <= layout.HEADS_MAX or not all(1 <= n <= layout.CHOICE_LIMIT for n in sizes):
        out.append(f"{key}head_sizes = {sizes!r}: must hold 1 to {layout.HEADS_MAX} sizes, one per action head, "
                   f"each 1..{layout.CHOICE_LIMIT}")
        return out
    heads = len(sizes)
    problem = layout.shape_problem(s.entities, s.features if s.entities else 0, s.globals, heads, max(sizes))
    if problem:
        out.append(f"{key}{problem}")
    if s.pointer_head is not None:
        if not 0 <= s.pointer_head < heads:
            out.append(f"{key}pointer_head = {s.pointer_head}: must be a head, 0..{heads - 1}")
        elif s.entities == 0 or sizes[s.pointer_head] < s.entities:
            out.append(f"{key}pointer_head = {s.pointer_head}: head {s.pointer_head} has {sizes[s.pointer_head]} "
                       f"choices; a pointer head needs entities = {s.entities} of them (one per entity of a row), "
                       f"and a row with entities")
    if s.noop and (len(s.noop) != heads
                   or not all(c == -1 or 0 <= c < n for c, n in zip(s.noop, sizes))):
        out.append(f"{key}noop = {s.noop!r}: must give, per head, a choice under its size or -1 (none): "
                   f"{heads} values")
    return out


def _resolve(s: SpecSection, key: str, out: list[str]) -> Callable | None:
    """Imports the replay viewer and checks the parity module can be found; problems to out."""
    view = None
    if s.replay_view:
        mod, _, func = s.replay_view.partition(":")
        if not _MODULE.fullmatch(mod) or not func.isidentifier():
            out.append(f"{key}replay_view = {s.replay_view!r}: must be 'package.module:function'")
        else:
            try:
                view = getattr(importlib.import_module(mod), func)
            except Exception as e:  # noqa: BLE001 (any import failure is the user's module's)
                out.append(f"{key}replay_view = {s.replay_view!r}: cannot import it: {type(e).__name__}: {e}")
            else:
                if not callable(view):
                    out.append(f"{key}replay_view = {s.replay_view!r}: {func} is not a function")
    if s.parity:
        try:
            found = bool(_MODULE.fullmatch(s.parity)) and importlib.util.find_spec(s.parity) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(f"{key}parity = {s.parity!r}: no such module (a 'package.module' on the Python path)")
    return view


def declare(name: str, s: SpecSection, source: str, problems: list[str], register: bool = True) -> None:
    """Checks the spec's keys together and declares the game `name` in the registry
    (when register and nothing is wrong); each problem, naming the file (for a spec
    file) or `spec.` and the key, to problems."""
    key = f"{source}: " if source else "spec."
    out: list[str] = []
    if not name.isidentifier():
        out.append(f"game = {name!r}: a declared game's name must be an identifier (letters, digits, _)")
    elif name in games.names() and not games.is_declared(name):
        out.append(f"game = {name!r}: a registered game; a recipe's [spec] declares a new one: give it another name")
    out += _head_problems(s, key)
    for label in s.levels:
        if not label or "\0" in label:
            out.append(f"{key}levels key {label!r}: a level's label must be a non-empty string without NUL")
    view = _resolve(s, key, out)
    if register and not out:
        try:
            games.declare(make_game(
                name, n_types=s.n_types, head_sizes=tuple(s.head_sizes), pointer_head=s.pointer_head,
                noop=tuple(None if c == -1 else c for c in s.noop) if s.noop else None, row=row_layout(s),
                opponent_env=s.opponent_env, opponent_default=s.opponent_default,
                levels={k: Level(dict(v.env), None if v.args is None else tuple(v.args)) for k, v in s.levels.items()},
                seed_env=s.seed_env, result=s.result, draw_within=s.draw_within,
                rewards={"win": s.win_reward, "loss": s.loss_reward, "draw": s.draw_reward},
                replay_dir=s.replay_dir, replay_suffixes=tuple(s.replay_suffixes), replay_view=view,
                parity=s.parity))
        except (ValueError, TypeError) as e:
            out.append(f"{key.rstrip('.: ')}: {e}")
    problems += out


def check_name(name: Any, problems: list[str]) -> None:
    """A recipe without a [spec] must not name a game another recipe declared (this
    process knows it, a game host or a later process would not)."""
    if isinstance(name, str) and games.is_declared(name):
        problems.append(f"game = {name!r}: a game declared by a recipe's [spec]; this recipe has none: "
                        f"add its [spec] table or spec = \"FILE.toml\"")
