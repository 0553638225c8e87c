"""Recipes: TOML files typed as dataclasses, one per section, validated at load.

Every error is collected and reported together, each naming the file, the key and the
value. Any value can be overridden from the command line: `--set section.key=value`
(the value is read as TOML, and as a string when it is not valid TOML).

What is checked here needs nothing but the recipe: types, choices, ranges (every float
of every section finite, every duration at most a year), strings without NUL, env keys
and values, the `--set` paths. What needs the machine (binaries, devices, folders,
/dev/shm space, process and file limits) is in preflight.py, run before anything is
created.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from w3async import games

REPO_ROOT = Path(__file__).resolve().parent.parent


class RecipeError(ValueError):
    """A recipe that does not load: every problem, one per line."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"recipe {path}:\n  " + "\n  ".join(problems))


@dataclass
class GameGroup:
    """A group of identical game processes ([[games]]; a recipe may mix groups)."""

    binary: str = "build/native/null_game"
    """The game: a Linux executable, or a Windows .exe for runtime = "wine". Relative
    paths are from the repository root."""
    runtime: str = "native"
    """"native" (eventfd doorbells) or "wine" (FIFO doorbells, the table through Z:)."""
    count: int = 1
    """Processes in this group."""
    lanes: int = 1
    """Lanes (whole games) per process."""
    sides: int = 2
    """Agent sides per lane: rows per process = lanes * sides."""
    nice: int = 10
    """Nice level of the games, so the supervisor and the learner get the CPU first."""
    role: str = "train"
    """"train": the current policy's rows feed the learner; "eval": played by the current
    policy (against the built-in AI at fixed seeds), logged, never trained on."""
    env: dict = field(default_factory=dict)
    """Extra environment for the game (strings). "{run_dir}" in a value becomes the run
    folder ("{run_dir_windows}": the same as a Z: path, for Wine games)."""


@dataclass
class RuntimeSection:
    """Wine settings ([runtime]); unused by native groups."""

    wine: str = "wine"
    """The Wine loader, or a Proton build folder (see runtime_wine.WineConfig)."""
    cache_dir: str = ""
    """Where Wine prefixes live ('' : $W3ASYNC_CACHE or ~/.cache/w3async)."""
    fsync: bool = False
    """WINEFSYNC (Proton only: nothing on stock Wine)."""
    esync: bool = False
    """WINEESYNC (Proton/staging only: nothing on stock Wine)."""


@dataclass
class SupervisorSection:
    """How the supervisor answers and watches ([supervisor])."""

    policy: str = "check"
    """"check" (the null game's checkable answers), "random" (uniform under the masks)
    or "network" (the learner's policy)."""
    gather: str = "c"
    """Row checks and gathers in "c" (csrc/rows.c) or "numpy" (the reference path)."""
    round_period_ms: float = 0.0
    """At most one round every this many ms: bigger rounds, a little more latency."""
    hang_timeout_s: float = 30.0
    """A game that posts nothing for this long after its rows were answered is hung."""
    start_timeout_s: float = 60.0
    """Time a (re)started game has to post its first rows (Wine needs a few seconds)."""
    stop_timeout_s: float = 3.0
    """On shutdown, how long games get to exit by themselves before SIGTERM, then SIGKILL."""
    max_start_failures: int = 3
    """A slot whose game fails this many starts in a row is marked failed."""
    backoff_s: float = 0.5
    """First restart delay of a slot; doubles per failure in a row, capped below."""
    backoff_max_s: float = 10.0
    """Cap on a slot's restart delay."""
    restart_budget: int = 20
    """Restarts a slot may need within restart_window_s (exits of every kind, 0 included,
    hangs, bad rows; not the recycle of a healthy start) before it is marked failed."""
    restart_window_s: float = 60.0
    """The window of the restart budget."""
    min_uptime_s: float = 2.0
    """A start that posted and lived this long is healthy: its exit 0 (an episode quota)
    restarts at once, uncounted, and the backoff starts over."""
    progress_s: float = 5.0
    """Seconds between console progress lines (0: none)."""


@dataclass
class InferenceSection:
    """The inference rounds' compute ([inference])."""

    device: str = "cpu"
    """"cpu", or "cuda" (streams and graphs; only where torch sees a GPU)."""
    num_threads: int = 1
    """torch threads of the inference worker (on 2 cores: 1, and 1 for the learner)."""
    n_slots: int = 3
    """Networks held: slot 0 the current policy, the rest past snapshots (league)."""
    seed: int = 0
    """Seeds the networks' initial weights and the action sampling."""


@dataclass
class CheckpointSection:
    """Checkpoints ([checkpoint]): atomic, with a `latest` pointer; a run resumes from one."""

    every_updates: int = 10
    """A checkpoint every this many learner updates (and one at the end of the run)."""
    keep: int = 3
    """Checkpoints kept on disk (the newest)."""


@dataclass
class EvaluationSection:
    """Evaluation against the built-in AI ([evaluation])."""

    window: int = 50
    """Win rates are over each level's last `window` evaluation episodes."""


@dataclass
class StatusSection:
    """The status server ([status]): /status, /metrics, /games and the dashboard."""

    enabled: bool = True
    """Serve the run's state while it runs."""
    host: str = "127.0.0.1"
    """Address to listen on (loopback by default: the page changes nothing, but it is yours)."""
    port: int = 0
    """Port; 0 picks a free one. The URL is printed and left in runs/<run>/status.url.
    A port in use is a clear error at start."""


@dataclass
class StopSection:
    """When the run ends by itself ([stop]); 0 means no limit."""

    steps: int = 0
    """Agent steps (rows answered)."""
    updates: int = 0
    """Learner updates."""
    seconds: float = 0.0
    """Wall-clock seconds."""
    minutes: float = 0.0
    """Wall-clock minutes (with seconds also set, the sooner limit wins)."""


@dataclass
class Recipe:
    name: str = "unnamed"
    game: str = "null"
    """The game spec: "null" or "duel" (type ids, action heads)."""
    games: list = field(default_factory=lambda: [GameGroup()])
    runtime: RuntimeSection = field(default_factory=RuntimeSection)
    supervisor: SupervisorSection = field(default_factory=SupervisorSection)
    stop: StopSection = field(default_factory=StopSection)
    inference: InferenceSection = field(default_factory=InferenceSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    evaluation: EvaluationSection = field(default_factory=EvaluationSection)
    status: StatusSection = field(default_factory=StatusSection)
    network: object = None
    """network.NetConfig ([network]): the policy's size."""
    learner: object = None
    """learner.LearnerConfig ([learner]): PPO's hyper-parameters and pacing."""
    trajectories: object = None
    """trajectories.TrajConfig ([trajectories]): sequence length, batch, queue."""
    league: object = None
    """league.LeagueConfig ([league]): snapshots and opponents."""
    path: str = ""
    """Where the recipe was read from (set by load_recipe)."""

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
_CHOICES = {
    ("games", "runtime"): ("native", "wine"),
    ("games", "role"): ("train", "eval"),
    ("supervisor", "policy"): ("check", "random", "network"),
    ("supervisor", "gather"): ("c", "numpy"),
    ("", "game"): games.NAMES,  # the games registry, read at each check (a game registered later counts)
}


def _base_type(tp: Any) -> Any:
    """float for `float | None` (TOML has no None: only the other type can be written)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _type_ok(tp: Any, value: Any) -> tuple[bool, Any]:
    """Does value fit the annotation tp? Ints are accepted for floats."""
    tp = _base_type(tp)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return True, float(value)
    if tp is int and isinstance(value, bool):
        return False, value
    if tp is dict:
        return isinstance(value, dict), value
    if tp in (int, float, str, bool):
        return isinstance(value, tp), value
    return True, value


YEAR_S = 365 * 86400
"""The longest duration a recipe may name (any key in _s, _ms, seconds or minutes)."""


def _duration_unit(key: str) -> float | None:
    """Seconds per unit of a key that names a duration by its suffix, else None."""
    if key.endswith("_ms"):
        return 1e-3
    if key.endswith("_s") or key == "seconds":
        return 1.0
    if key == "minutes" or key.endswith("_min"):
        return 60.0
    return None


def _value_problems(name: str, key: str, value: Any) -> list[str]:
    """Checks that hold for every key of a kind, whatever its section: floats finite,
    durations at most a year, seeds >= 0, strings without NUL, env keys and values that
    an environment can hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{name} = {value!r}: must be a finite number"]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        unit = _duration_unit(key)
        if unit is not None and abs(value) * unit > YEAR_S:
            return [f"{name} = {value!r}: must be at most {YEAR_S / unit:.12g} (a year)"]
        if key == "seed" and value < 0:
            return [f"{name} = {value!r}: must be >= 0"]
    if isinstance(value, str) and "\0" in value:
        return [f"{name} = {value!r}: contains a NUL character"]
    if isinstance(value, dict):  # env
        out = []
        for k, v in value.items():
            if not k or "=" in k or "\0" in k:
                out.append(f"{name} key {k!r} (= {v!r}): an environment name must be non-empty, "
                           f"without '=' or NUL")
            elif not isinstance(v, (str, int, float, bool)):
                out.append(f"{name}.{k} = {v!r}: must be a string or a number, not {type(v).__name__}")
            elif isinstance(v, float) and not math.isfinite(v):
                out.append(f"{name}.{k} = {v!r}: must be a finite number (or a string)")
            elif isinstance(v, str) and "\0" in v:
                out.append(f"{name}.{k} = {v!r}: contains a NUL character")
        return out
    return []


def _fill(cls: type, data: dict, where: str, problems: list[str]) -> Any:
    """Build dataclass cls from data, appending a message per bad key or value."""
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.name != "path"}
    kwargs = {}
    for key, value in data.items():
        name = f"{where}.{key}" if where else key
        if key not in known:
            problems.append(f"unknown key {name!r} (known: {', '.join(sorted(known))})")
            continue
        tp = hints[key]
        ok, value = _type_ok(tp, value)
        if not ok:
            problems.append(f"{name} = {value!r}: expected {getattr(_base_type(tp), '__name__', tp)}, got {type(value).__name__}")
            continue
        choices = _CHOICES.get((where.split("[")[0], key))
        if choices and value not in choices:
            problems.append(f"{name} = {value!r}: must be one of {', '.join(map(repr, choices))}")
            continue
        bad = _value_problems(name, key, value)
        if bad:
            problems += bad
            continue
        if tp is dict:
            value = {k: (str(int(v)) if isinstance(v, bool) else str(v)) for k, v in value.items()}
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:  # the section's own checks (__post_init__)
        problems.append(f"[{where}] {e}")
        return cls()


MAX_ROWS = 2**31 - 1
"""Rows in the table at most (the header and the games count them in 32 bits); the
machine's /dev/shm and memory usually bound them far lower (preflight.py)."""
MAX_ROUND_PERIOD_MS = 60_000.0


def _groups_text(r: Recipe) -> str:
    return "; ".join(f"games[{i}]: count = {g.count}, lanes = {g.lanes}, sides = {g.sides}"
                     for i, g in enumerate(r.games))


def _check_ranges(r: Recipe, problems: list[str]) -> None:
    for i, g in enumerate(r.games):
        w = f"games[{i}]"
        if g.count < 1:
            problems.append(f"{w}.count = {g.count}: must be at least 1")
        if g.lanes < 1:
            problems.append(f"{w}.lanes = {g.lanes}: must be at least 1")
        if g.sides not in (1, 2):
            problems.append(f"{w}.sides = {g.sides}: must be 1 or 2")
        if not -20 <= g.nice <= 19:
            problems.append(f"{w}.nice = {g.nice}: must be in -20..19")
    n_rows = sum(g.count * g.lanes * g.sides for g in r.games)
    if n_rows > MAX_ROWS:
        problems.append(f"games: {n_rows} rows ({_groups_text(r)}): the table holds at most {MAX_ROWS} "
                        f"(lower games.count or games.lanes)")
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", r.inference.device):
        problems.append(f"inference.device = {r.inference.device!r}: must be 'cpu', 'cuda' or 'cuda:N'")
    if not r.name or r.name in (".", "..") or "/" in r.name:
        problems.append(f"name = {r.name!r}: must be a plain name (it starts the run folder's name): "
                        f"not empty, no '/'")
    if r.inference.num_threads < 1 or r.inference.n_slots < 1:
        problems.append(f"inference.num_threads = {r.inference.num_threads}, n_slots = {r.inference.n_slots}: both must be >= 1")
    if r.checkpoint.every_updates < 1 or r.checkpoint.keep < 1:
        problems.append(f"checkpoint.every_updates = {r.checkpoint.every_updates}, keep = {r.checkpoint.keep}: both must be >= 1")
    if not 0 <= r.status.port <= 65535:
        problems.append(f"status.port = {r.status.port}: must be in 0..65535")
    if r.evaluation.window < 1:
        problems.append(f"evaluation.window = {r.evaluation.window}: must be >= 1")
    s = r.supervisor
    for key in ("hang_timeout_s", "start_timeout_s", "stop_timeout_s", "backoff_s", "backoff_max_s"):
        if getattr(s, key) <= 0:
            problems.append(f"supervisor.{key} = {getattr(s, key)}: must be > 0")
    if not 0 <= s.round_period_ms <= MAX_ROUND_PERIOD_MS:
        problems.append(f"supervisor.round_period_ms = {s.round_period_ms}: must be in 0..{MAX_ROUND_PERIOD_MS} "
                        f"(a round at least once a minute)")
    if s.max_start_failures < 1:
        problems.append(f"supervisor.max_start_failures = {s.max_start_failures}: must be >= 1")
    for key in ("steps", "updates", "seconds", "minutes"):
        if getattr(r.stop, key) < 0:
            problems.append(f"stop.{key} = {getattr(r.stop, key)}: must be >= 0")


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
    return {f.name: _base_type(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "path"}


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
    top = {k: v for k, v in data.items() if k not in _SECTIONS and k not in _learning_sections() and k != "games"}
    recipe = _fill(Recipe, top, "", problems)
    recipe.path = path
    for key, cls in _SECTIONS.items():
        if key in data:
            if not isinstance(data[key], dict):
                problems.append(f"{key} = {data[key]!r}: expected a table [{key}]")
                continue
            setattr(recipe, key, _fill(cls, data[key], key, problems))
    for key, cls in _learning_sections().items():
        section = data.get(key, {})
        if not isinstance(section, dict):
            problems.append(f"{key} = {section!r}: expected a table [{key}]")
            section = {}
        setattr(recipe, key, _fill(cls, section, key, problems))
    if "games" in data:
        groups = data["games"]
        if isinstance(groups, dict):
            groups = [groups]
        if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
            problems.append(f"games = {data['games']!r}: expected one [games] table or [[games]] tables")
        else:
            recipe.games = [_fill(GameGroup, g, f"games[{i}]", problems) for i, g in enumerate(groups)]
    _check_ranges(recipe, problems)
    return recipe


def resolve_recipe_path(name_or_path: str) -> str:
    """'null' -> recipes/null.toml; a path is kept."""
    if os.path.exists(name_or_path) or name_or_path.endswith(".toml"):
        return name_or_path
    return str(REPO_ROOT / "recipes" / f"{name_or_path}.toml")


def recipe_to_dict(recipe: Recipe) -> dict:
    """The resolved recipe, for the run folder and checkpoints."""
    return dataclasses.asdict(recipe)
