"""Recipes: TOML files typed as pydantic dataclasses, one per section, validated at load.

Every error is collected and reported together, each naming the file, the key and the
value. Any value can be overridden from the command line: `--set section.key=value`
(the value is read as TOML, and as a string when it is not valid TOML).

The sections are pydantic dataclasses (`extra="forbid"`, strict scalars, finite floats);
a key's type, bounds and single-value checks are its annotation. pydantic's errors are
turned into the recipe's messages ("KEY = VALUE: why") by recipes/checks.py, which also
holds the checks across fields; this module is the one way in. What is checked here
needs nothing but the recipe: types, choices, ranges (every float of every section
finite, every duration at most a year), strings without NUL, env keys and values, the
`--set` paths. What needs the machine (binaries, devices, folders, /dev/shm space,
process and file limits) is in preflight.py, run before anything is created.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import stat
import tomllib
import typing
from typing import Any

from pydantic import ValidationError

from w3async.recipes import spec as recipe_spec
from w3async.recipes.checks import (
    _base_type,
    check_ranges,
    drop,
    problems_of,
)
from w3async.recipes.sections import (
    REPO_ROOT,
    CheckpointSection,
    ClusterSection,
    EvaluationSection,
    GameGroup,
    InferenceSection,
    Recipe,
    RuntimeSection,
    StatusSection,
    StopSection,
    SupervisorSection,
)
from w3async.recipes.learning import LearnerConfig, LeagueConfig, NetConfig, TrajConfig
from w3async.recipes.spec import SpecSection


class RecipeError(ValueError):
    """A recipe that does not load: every problem, one per line."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"recipe {path}:\n  " + "\n  ".join(problems))

    def __reduce__(self):  # pickled whole (a game host's error crosses Ray)
        return type(self), (self.path, self.problems)


_LEARNING = {"network": NetConfig, "learner": LearnerConfig, "trajectories": TrajConfig, "league": LeagueConfig}
_SECTIONS = {"runtime": RuntimeSection, "supervisor": SupervisorSection, "stop": StopSection,
             "inference": InferenceSection, "checkpoint": CheckpointSection, "evaluation": EvaluationSection,
             "status": StatusSection, "cluster": ClusterSection, **_LEARNING}


def _learning_sections() -> dict:
    """The learning side's sections (recipes/learning.py: no torch)."""
    return dict(_LEARNING)


def _validate(model: type, data: dict, where: str, problems: list[str]) -> Any:
    """model(**data), a message per problem appended to problems; a bad value takes
    its default (so that the checks across fields still see the rest)."""
    try:
        return model(**data)
    except ValidationError as e:
        errors = e.errors(include_url=False)
    data = copy.deepcopy(data)
    for _ in range(3):
        for err in errors:
            problems += problems_of(err, model, where)
        if not all(drop(data, tuple(err["loc"])) for err in errors):
            break
        try:
            return model(**data)
        except ValidationError as e:
            errors = e.errors(include_url=False)
    return model()


def _key_parts(key: str) -> list[str]:
    """A dotted key's parts, as TOML reads them: a part in quotes may hold dots and
    colons (spec.levels."v1.2".env.X); an unclosed quote leaves the rest one part."""
    parts, cur, quote = [], "", ""
    for ch in key:
        if quote:
            if ch == quote:
                quote = ""
            else:
                cur += ch
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*parts, cur.strip()]


def parse_override(text: str) -> tuple[list[str], Any]:
    """'section.key=value' -> (['section', 'key'], value read as TOML or a string).
    ValueError names the --set when there is no '=' or the key has an empty part."""
    if "=" not in text:
        raise ValueError(f"--set {text!r}: expected section.key=value")
    key, raw = text.split("=", 1)
    parts = _key_parts(key)
    if not all(parts):
        raise ValueError(f"--set {text!r}: the key {key.strip()!r} has an empty part: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise ValueError(f"--set {key.strip()}=...: its value nests arrays or tables too deeply") from None
    return parts, value


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _base_type(hints[f.name]) for f in dataclasses.fields(cls) if f.init}


def _walk(text: str, cls: type, done: list[str], rest: list[str]) -> str | None:
    """Follows the --set path `rest` through the schema from section class cls (`done`:
    the path so far): a key of a section, a section within it ([games.inject], [spec]),
    a name in a table of names (env.NAME, addresses.NAME, levels.LABEL) and on into the
    class of its values. A problem naming the path, or None."""
    while True:
        known = _fields(cls)
        where = ".".join(done)
        if rest[0] not in known:
            return (f"--set {text!r}: unknown key {'.'.join(done + rest)!r} "
                    f"(known in {where}: {', '.join(sorted(known))})")
        tp, done, rest = known[rest[0]], done + [rest[0]], rest[1:]
        if not rest:
            return None  # a value, or a whole section as a TOML table
        if dataclasses.is_dataclass(tp):
            cls = tp
            continue
        if tp is dict or typing.get_origin(tp) is dict:
            args = typing.get_args(tp)
            done, rest = done + [rest[0]], rest[1:]
            if not rest:
                return None
            if args and dataclasses.is_dataclass(args[1]):
                cls = args[1]
                continue
        return f"--set {text!r}: {'.'.join(done)} is a value, not a section"


def _check_path(text: str, parts: list[str]) -> str | None:
    """Does the --set path name a value of the recipe's schema? A problem, or None."""
    sections = _SECTIONS
    head, rest = parts[0], parts[1:]
    if head == "games":
        if not rest:
            return (f"--set {text!r}: games is the list of [[games]] groups: set games.KEY (every group) "
                    f"or games.N.KEY (group N)")
        if rest[0].isdigit():
            if not rest[1:]:
                return f"--set {text!r}: games.{parts[1]} is a group: set games.{parts[1]}.KEY"
            return _walk(text, GameGroup, parts[:2], rest[1:])
        return _walk(text, GameGroup, ["games"], rest)
    if head in sections:
        if not rest:
            return f"--set {text!r}: {head} is a section: set {head}.KEY"
        return _walk(text, sections[head], [head], rest)
    known = {k: t for k, t in _fields(Recipe).items() if k not in sections and k != "games"}
    if head not in known:
        return (f"--set {text!r}: unknown key {'.'.join(parts)!r} "
                f"(known: {', '.join(sorted([*known, 'games', *sections]))})")
    if not rest:
        return None
    if head == "spec":
        return _walk(text, SpecSection, ["spec"], rest)
    return f"--set {text!r}: {head} is a value, not a section"


def apply_overrides(data: dict, overrides: list[str], path: str = "<overrides>") -> list[str]:
    """Set each 'a.b=value' in the raw TOML dict; games.KEY sets KEY in every group,
    games.N.KEY in group N only; spec.KEY in a spec file's table (read first, relative
    to the recipe at path). Returns a problem per --set that could not be applied (the
    others are applied)."""
    problems = []
    for text in overrides:
        try:
            parts, value = parse_override(text)
        except ValueError as e:
            problems.append(str(e))
            continue
        bad = _check_path(text, parts)
        if bad:
            problems.append(bad)
            continue
        if parts[0] == "games":
            groups = data.setdefault("games", [{}])
            if isinstance(groups, dict):
                groups = data["games"] = [groups]
            if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
                problems.append(f"--set {text!r}: the recipe's games is not a list of [[games]] tables")
                continue
            if parts[1].isdigit():
                n = int(parts[1])
                if n >= len(groups):
                    problems.append(f"--set {text!r}: the recipe has {len(groups)} game group(s) "
                                    f"(games.0 .. games.{len(groups) - 1})")
                    continue
                targets, rest = [groups[n]], parts[2:]
            else:
                targets, rest = groups, parts[1:]
        else:
            targets, rest = [data], parts
            if parts[0] == "spec" and len(parts) > 1:
                bad = recipe_spec.inline(data, path)  # spec = "FILE": its table takes the --set
                if bad:
                    problems.append(f"--set {text!r}: {bad}")
                    continue
        try:
            for t in targets:
                d = t
                for p in rest[:-1]:
                    d = d.setdefault(p, {})
                    if not isinstance(d, dict):
                        raise ValueError(f"--set {text!r}: {p} = {d!r} in the recipe is not a table")
                d[rest[-1]] = value
        except ValueError as e:
            problems.append(str(e))
    return problems


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _read_toml(path: str) -> tuple[dict | None, str | None]:
    """The file's TOML, or the one problem that stops reading it. Opened without
    blocking and read only if it is a regular file: open() of a FIFO waits for a writer
    (a recipe path that was a FIFO hung with no message), a device may never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, "no such file"
    except OSError as e:
        return None, f"cannot be read: {e.strerror or e}"
    except ValueError as e:  # a NUL in the path
        return None, f"cannot be read: {e}"
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            return None, "is a folder, not a recipe file"
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _KINDS if test(mode)), f"of mode {mode:#o}")
            return None, f"is {kind}, not a regular file: a recipe is a TOML file"
        with os.fdopen(os.dup(fd), "rb") as f:
            raw = f.read()
    except OSError as e:
        return None, f"cannot be read: {e.strerror or e}"
    finally:
        os.close(fd)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text: byte {raw[e.start]:#04x} at offset {e.start}"
    try:
        return tomllib.loads(text), None
    except tomllib.TOMLDecodeError as e:
        return None, f"not valid TOML: {e}"
    except RecursionError:
        return None, "nests arrays or tables too deeply to be a recipe (hundreds of levels)"


def load_recipe(path: str | os.PathLike, overrides: list[str] | None = None) -> Recipe:
    """Read, override and validate a recipe; RecipeError lists every problem."""
    path = str(path)
    data, problem = _read_toml(path)
    if problem:
        raise RecipeError(path, [problem])
    problems = apply_overrides(data, overrides or [], path)
    from_recipe_folder(data, os.path.dirname(os.path.abspath(path)))
    recipe = _build(data, path, problems)
    if problems:
        raise RecipeError(path, problems)
    return recipe


# The keys that name a file or folder: (section or None for a game group, key).
PATH_KEYS = ((None, "binary"), ("inject", "adapter"), ("inject", "addresses_file"), ("inject", "cwd"))


def from_recipe_folder(data: dict, folder: str) -> None:
    """A recipe file's relative paths (its games' binaries, adapters, addresses files and
    working folders, runtime.cache_dir; a --set value too) made absolute from the
    recipe's folder, in place: a recipe and its game can move together, in or outside
    the repository. The spec file is read the same way (recipe_spec.inline). A recipe
    given as a table (recipe_from_dict: the Python API, a run's recipe.json, whose paths
    are absolute already) keeps its paths, a relative one from the repository root."""

    def fix(table, key: str) -> None:
        v = table.get(key) if isinstance(table, dict) else None
        if isinstance(v, str) and v and "\0" not in v and not os.path.isabs(v):
            table[key] = os.path.normpath(os.path.join(folder, v))

    groups = data.get("games")
    for g in groups if isinstance(groups, list) else []:
        for section, key in PATH_KEYS:
            fix(g.get(section) if section and isinstance(g, dict) else g, key)
    fix(data.get("runtime"), "cache_dir")


def recipe_from_dict(data: dict, path: str = "<dict>") -> Recipe:
    problems: list[str] = []
    recipe = _build(data, path, problems)
    if problems:
        raise RecipeError(path, problems)
    return recipe


def _build(data: dict, path: str, problems: list[str]) -> Recipe:
    """The recipe from the raw dict; a message per problem appended to problems."""
    declared = data.get("spec") is not None  # None: a resolved recipe of a registered game
    # The game a [spec] declares is not in the registry yet: its name is checked by
    # recipe_spec.declare, not by the registry's choice.
    skip = {"spec", *(("game",) if declared else ())}
    recipe = _validate(Recipe, {k: v for k, v in data.items() if k not in skip}, "", problems)
    recipe.path = path
    if declared:
        _declare(recipe, data, path, problems)
    else:
        recipe_spec.check_name(recipe.game, problems)
    check_ranges(recipe, problems)
    return recipe


def _declare(recipe: Recipe, data: dict, path: str, problems: list[str]) -> None:
    """The recipe's own game: its [spec] (or spec file) validated, declared under `game`."""
    game = data.get("game", "null")
    if not isinstance(game, str):
        problems.append(f"game = {game!r}: expected str, got {type(game).__name__}")
        return
    recipe.game = game
    bad = recipe_spec.inline(data, path)
    if bad:
        problems.append(bad)
        return
    table = data["spec"]
    if not isinstance(table, dict):
        problems.append(f"spec = {table!r}: expected a table [spec] or a file name (spec = \"mygame.toml\")")
        return
    source = getattr(table, "source", "")
    found: list[str] = []
    recipe.spec = _validate(SpecSection, dict(table), "" if source else "spec", found)
    problems += [f"{source}: {p}" if source else p for p in found]
    # the checks across keys run on what is left (a bad value took its default): every
    # problem at once, and the game is declared only when there is none
    recipe_spec.declare(game, recipe.spec, source, problems, register=not found)


def resolve_recipe_path(name_or_path: str) -> str:
    """'null' -> recipes/null.toml; a path is kept."""
    if os.path.exists(name_or_path) or name_or_path.endswith(".toml"):
        return name_or_path
    return str(REPO_ROOT / "recipes" / f"{name_or_path}.toml")


def recipe_to_dict(recipe: Recipe) -> dict:
    """The resolved recipe, for the run folder and checkpoints."""
    return dataclasses.asdict(recipe)
