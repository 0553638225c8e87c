"""Recipes: TOML files typed as pydantic dataclasses, one per section, validated at load.

Every error is collected and reported together, each naming the file, the key and the
value. Any value can be overridden from the command line: `--set section.key=value`
(the value is read as TOML, and as a string when it is not valid TOML).

The sections are pydantic dataclasses (`extra="forbid"`, strict scalars, finite floats);
a key's type, bounds and single-value checks are its annotation. pydantic's errors are
turned into the recipe's messages ("KEY = VALUE: why") by recipe_checks.py, which also
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
import tomllib
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError
from pydantic.dataclasses import dataclass

from w3async import games
from w3async.recipe_checks import (  # noqa: F401 (YEAR_S, MAX_ROWS, _base_type: the module's API)
    CONFIG,
    MAX_ROWS,
    YEAR_S,
    Bool,
    Device,
    Env,
    Float,
    Int,
    Name,
    Str,
    _base_type,
    check_ranges,
    choice,
    drop,
    game_groups,
    mirror,
    problems_of,
    year_in,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
MAX_ROUND_PERIOD_MS = 60_000.0


class RecipeError(ValueError):
    """A recipe that does not load: every problem, one per line."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"recipe {path}:\n  " + "\n  ".join(problems))


_CHOICES = {
    ("games", "runtime"): ("native", "wine"),
    ("games", "role"): ("train", "eval"),
    ("supervisor", "policy"): ("check", "random", "network"),
    ("supervisor", "gather"): ("c", "numpy"),
    ("", "game"): games.NAMES,  # the games registry, read at each check (a game registered later counts)
}


def _one_of(section: str, key: str) -> Any:
    return choice(lambda: _CHOICES[(section, key)])


@dataclass(config=CONFIG)
class GameGroup:
    """A group of identical game processes ([[games]]; a recipe may mix groups)."""

    binary: Str = "build/native/null_game"
    """The game: a Linux executable, or a Windows .exe for runtime = "wine". Relative
    paths are from the repository root."""
    runtime: Annotated[Str, _one_of("games", "runtime")] = "native"
    """"native" (eventfd doorbells) or "wine" (FIFO doorbells, the table through Z:)."""
    count: Int = Field(1, ge=1)
    """Processes in this group."""
    lanes: Int = Field(1, ge=1)
    """Lanes (whole games) per process."""
    sides: Int = Field(2, ge=1, le=2)
    """Agent sides per lane: rows per process = lanes * sides."""
    nice: Int = Field(10, ge=-20, le=19)
    """Nice level of the games, so the supervisor and the learner get the CPU first."""
    role: Annotated[Str, _one_of("games", "role")] = "train"
    """"train": the current policy's rows feed the learner; "eval": played by the current
    policy (against the built-in AI at fixed seeds), logged, never trained on."""
    env: Env = Field(default_factory=dict)
    """Extra environment for the game (strings). "{run_dir}" in a value becomes the run
    folder ("{run_dir_windows}": the same as a Z: path, for Wine games)."""


@dataclass(config=CONFIG)
class RuntimeSection:
    """Wine settings ([runtime]); unused by native groups."""

    wine: Str = "wine"
    """The Wine loader, or a Proton build folder (see runtime_wine.WineConfig)."""
    cache_dir: Str = ""
    """Where Wine prefixes live ('' : $W3ASYNC_CACHE or ~/.cache/w3async)."""
    fsync: Bool = False
    """WINEFSYNC (Proton only: nothing on stock Wine)."""
    esync: Bool = False
    """WINEESYNC (Proton/staging only: nothing on stock Wine)."""


@dataclass(config=CONFIG)
class SupervisorSection:
    """How the supervisor answers and watches ([supervisor])."""

    policy: Annotated[Str, _one_of("supervisor", "policy")] = "check"
    """"check" (the null game's checkable answers), "random" (uniform under the masks)
    or "network" (the learner's policy)."""
    gather: Annotated[Str, _one_of("supervisor", "gather")] = "c"
    """Row checks and gathers in "c" (csrc/rows.c) or "numpy" (the reference path)."""
    round_period_ms: Float = Field(0.0, ge=0, le=MAX_ROUND_PERIOD_MS)
    """At most one round every this many ms: bigger rounds, a little more latency (at
    least one round a minute)."""
    hang_timeout_s: Float = Field(30.0, gt=0, le=YEAR_S)
    """A game that posts nothing for this long after its rows were answered is hung."""
    start_timeout_s: Float = Field(60.0, gt=0, le=YEAR_S)
    """Time a (re)started game has to post its first rows (Wine needs a few seconds)."""
    stop_timeout_s: Float = Field(3.0, gt=0, le=YEAR_S)
    """On shutdown, how long games get to exit by themselves before SIGTERM, then SIGKILL."""
    max_start_failures: Int = Field(3, ge=1)
    """A slot whose game fails this many starts in a row is marked failed."""
    backoff_s: Float = Field(0.5, gt=0, le=YEAR_S)
    """First restart delay of a slot; doubles per failure in a row, capped below."""
    backoff_max_s: Float = Field(10.0, gt=0, le=YEAR_S)
    """Cap on a slot's restart delay."""
    restart_budget: Int = 20
    """Restarts a slot may need within restart_window_s (exits of every kind, 0 included,
    hangs, bad rows; not the recycle of a healthy start) before it is marked failed."""
    restart_window_s: Float = Field(60.0, ge=0, le=YEAR_S)
    """The window of the restart budget."""
    min_uptime_s: Float = Field(2.0, ge=0, le=YEAR_S)
    """A start that posted and lived this long is healthy: its exit 0 (an episode quota)
    restarts at once, uncounted, and the backoff starts over."""
    progress_s: Float = Field(5.0, ge=0, le=YEAR_S)
    """Seconds between console progress lines (0: none)."""


@dataclass(config=CONFIG)
class InferenceSection:
    """The inference rounds' compute ([inference])."""

    device: Device = "cpu"
    """"cpu", or "cuda" (streams and graphs; only where torch sees a GPU)."""
    num_threads: Int = Field(1, ge=1)
    """torch threads of the inference worker (on 2 cores: 1, and 1 for the learner)."""
    n_slots: Int = Field(3, ge=1)
    """Networks held: slot 0 the current policy, the rest past snapshots (league)."""
    seed: Int = Field(0, ge=0)
    """Seeds the networks' initial weights and the action sampling."""


@dataclass(config=CONFIG)
class CheckpointSection:
    """Checkpoints ([checkpoint]): atomic, with a `latest` pointer; a run resumes from one."""

    every_updates: Int = Field(10, ge=1)
    """A checkpoint every this many learner updates (and one at the end of the run)."""
    keep: Int = Field(3, ge=1)
    """Checkpoints kept on disk (the newest)."""


@dataclass(config=CONFIG)
class EvaluationSection:
    """Evaluation against the built-in AI ([evaluation])."""

    window: Int = Field(50, ge=1)
    """Win rates are over each level's last `window` evaluation episodes."""


@dataclass(config=CONFIG)
class StatusSection:
    """The status server ([status]): /status, /metrics, /games and the dashboard."""

    enabled: Bool = True
    """Serve the run's state while it runs."""
    host: Str = "127.0.0.1"
    """Address to listen on (loopback by default: the page changes nothing, but it is yours)."""
    port: Int = Field(0, ge=0, le=65535)
    """Port; 0 picks a free one. The URL is printed and left in runs/<run>/status.url.
    A port in use is a clear error at start."""


@dataclass(config=CONFIG)
class StopSection:
    """When the run ends by itself ([stop]); 0 means no limit."""

    steps: Int = Field(0, ge=0)
    """Agent steps (rows answered)."""
    updates: Int = Field(0, ge=0)
    """Learner updates."""
    seconds: Float = Field(0.0, ge=0, le=YEAR_S)
    """Wall-clock seconds."""
    minutes: Float = Field(0.0, ge=0, le=year_in("minutes"))
    """Wall-clock minutes (with seconds also set, the sooner limit wins)."""


@dataclass(config=CONFIG)
class Recipe:
    """A recipe: its top-level keys, its sections, the file it was read from."""

    name: Name = "unnamed"
    """The run's name: it starts the run folder's name (no '/')."""
    game: Annotated[Str, _one_of("", "game")] = "null"
    """The game spec: a name in the games registry (w3async.games: "null", "duel", ...)."""
    games: Annotated[list[GameGroup], BeforeValidator(game_groups)] = Field(default_factory=lambda: [GameGroup()])
    runtime: RuntimeSection = Field(default_factory=RuntimeSection)
    supervisor: SupervisorSection = Field(default_factory=SupervisorSection)
    stop: StopSection = Field(default_factory=StopSection)
    inference: InferenceSection = Field(default_factory=InferenceSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection)
    status: StatusSection = Field(default_factory=StatusSection)
    network: object = None
    """network.NetConfig ([network]): the policy's size."""
    learner: object = None
    """learner.LearnerConfig ([learner]): PPO's hyper-parameters and pacing."""
    trajectories: object = None
    """trajectories.TrajConfig ([trajectories]): sequence length, batch, queue."""
    league: object = None
    """league.LeagueConfig ([league]): snapshots and opponents."""
    path: str = dataclasses.field(default="", init=False)
    """Where the recipe was read from (set by load_recipe; not a key of the file)."""

    @property
    def stop_after_s(self) -> float:
        """The wall-clock limit: the sooner of seconds and minutes that are set (0: none)."""
        limits = [x for x in (self.stop.seconds, 60.0 * self.stop.minutes) if x > 0]
        return min(limits) if limits else 0.0

    def binary_path(self, group: GameGroup) -> Path:
        p = Path(group.binary)
        return p if p.is_absolute() else REPO_ROOT / p


_SECTIONS = {"runtime": RuntimeSection, "supervisor": SupervisorSection, "stop": StopSection,
             "inference": InferenceSection, "checkpoint": CheckpointSection, "evaluation": EvaluationSection,
             "status": StatusSection}


def _learning_sections() -> dict:
    """The learning side's typed sections (imported late: they pull in torch)."""
    from w3async.learn.learner import LearnerConfig  # noqa: PLC0415
    from w3async.learn.league import LeagueConfig  # noqa: PLC0415
    from w3async.learn.network import NetConfig  # noqa: PLC0415
    from w3async.learn.trajectories import TrajConfig  # noqa: PLC0415

    return {"network": NetConfig, "learner": LearnerConfig, "trajectories": TrajConfig, "league": LeagueConfig}


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


def parse_override(text: str) -> tuple[list[str], Any]:
    """'section.key=value' -> (['section', 'key'], value read as TOML or a string).
    ValueError names the --set when there is no '=' or the key has an empty part."""
    if "=" not in text:
        raise ValueError(f"--set {text!r}: expected section.key=value")
    key, raw = text.split("=", 1)
    parts = [p.strip() for p in key.split(".")]
    if not all(parts):
        raise ValueError(f"--set {text!r}: the key {key.strip()!r} has an empty part: expected section.key=value")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return parts, value


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _base_type(hints[f.name]) for f in dataclasses.fields(cls) if f.init}


def _check_path(text: str, parts: list[str]) -> str | None:
    """Does the --set path name a value of the recipe's schema? A problem, or None."""
    sections = {**_SECTIONS, **_learning_sections()}
    head, rest = parts[0], parts[1:]
    dotted = ".".join(parts)
    if head == "games":
        if not rest:
            return (f"--set {text!r}: games is the list of [[games]] groups: set games.KEY (every group) "
                    f"or games.N.KEY (group N)")
        if rest[0].isdigit():
            rest = rest[1:]
            if not rest:
                return f"--set {text!r}: games.{parts[1]} is a group: set games.{parts[1]}.KEY"
        cls, where = GameGroup, "games"
    elif head in sections:
        if not rest:
            return f"--set {text!r}: {head} is a section: set {head}.KEY"
        cls, where = sections[head], head
    else:
        cls, where, rest = Recipe, "", parts
    known = _fields(cls)
    if where == "":
        known = {k: t for k, t in known.items() if k not in sections and k != "games"}
    if rest[0] not in known:
        names = sorted(known) if where else sorted([*known, "games", *sections])
        return f"--set {text!r}: unknown key {dotted!r} (known{' in ' + where if where else ''}: {', '.join(names)})"
    depth = 2 if known[rest[0]] is dict else 1  # env.NAME
    if len(rest) > depth:
        return f"--set {text!r}: {'.'.join(parts[:len(parts) - len(rest) + depth])} is a value, not a section"
    return None


def apply_overrides(data: dict, overrides: list[str]) -> list[str]:
    """Set each 'a.b=value' in the raw TOML dict; games.KEY sets KEY in every group,
    games.N.KEY in group N only. Returns a problem per --set that could not be applied
    (the others are applied)."""
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


def _read_toml(path: str) -> tuple[dict | None, str | None]:
    """The file's TOML, or the one problem that stops reading it."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None, "no such file"
    except IsADirectoryError:
        return None, "is a folder, not a recipe file"
    except OSError as e:
        return None, f"cannot be read: {e.strerror or e}"
    except ValueError as e:  # a NUL in the path
        return None, f"cannot be read: {e}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 text: byte {raw[e.start]:#04x} at offset {e.start}"
    try:
        return tomllib.loads(text), None
    except tomllib.TOMLDecodeError as e:
        return None, f"not valid TOML: {e}"


def load_recipe(path: str | os.PathLike, overrides: list[str] | None = None) -> Recipe:
    """Read, override and validate a recipe; RecipeError lists every problem."""
    path = str(path)
    data, problem = _read_toml(path)
    if problem:
        raise RecipeError(path, [problem])
    problems = apply_overrides(data, overrides or [])
    recipe = _build(data, path, problems)
    if problems:
        raise RecipeError(path, problems)
    return recipe


def recipe_from_dict(data: dict, path: str = "<dict>") -> Recipe:
    problems: list[str] = []
    recipe = _build(data, path, problems)
    if problems:
        raise RecipeError(path, problems)
    return recipe


def _build(data: dict, path: str, problems: list[str]) -> Recipe:
    """The recipe from the raw dict; a message per problem appended to problems."""
    learning = _learning_sections()
    recipe = _validate(Recipe, {k: v for k, v in data.items() if k not in learning}, "", problems)
    recipe.path = path
    for key, cls in learning.items():
        section = data.get(key, {})
        if not isinstance(section, dict):
            problems.append(f"{key} = {section!r}: expected a table [{key}]")
            section = {}
        checked = _validate(mirror(cls), section, key, problems)
        try:  # the section's own checks (__post_init__)
            setattr(recipe, key, cls(**{f.name: getattr(checked, f.name) for f in dataclasses.fields(cls)}))
        except (ValueError, TypeError) as e:
            problems.append(f"[{key}] {e}")
            setattr(recipe, key, cls())
    check_ranges(recipe, problems)
    return recipe


def resolve_recipe_path(name_or_path: str) -> str:
    """'null' -> recipes/null.toml; a path is kept."""
    if os.path.exists(name_or_path) or name_or_path.endswith(".toml"):
        return name_or_path
    return str(REPO_ROOT / "recipes" / f"{name_or_path}.toml")


def recipe_to_dict(recipe: Recipe) -> dict:
    """The resolved recipe, for the run folder and checkpoints."""
    return dataclasses.asdict(recipe)
