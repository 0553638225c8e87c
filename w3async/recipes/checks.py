"""The recipe's checks that are not a field's type or bound, and pydantic's errors as the
recipe's messages. Used by recipes/load.py (the one way in); nothing else imports this.

- value checks that a field's annotation runs after its type: no NUL in a string, a
  plain run name, the device's syntax, a choice from recipes.load._CHOICES, an environment;
- `problems_of(error, ...)`: one pydantic ValidationError entry -> today's messages,
  "KEY = VALUE: why", the key dotted from the entry's loc (`games[1].lanes`,
  `supervisor.hang_timeout_s`);
- `check_ranges`: what spans fields (the table's rows over every group).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Annotated, Any, Callable

import annotated_types
from pydantic import AfterValidator, ConfigDict, Strict
from pydantic_core import PydanticCustomError

YEAR_S = 365 * 86400
"""The longest duration a recipe may name (any key in _s, _ms, seconds or minutes)."""

MAX_ROWS = 2**31 - 1
"""Rows in the table at most (the header and the games count them in 32 bits); the
machine's /dev/shm and memory usually bound them far lower (preflight.py)."""

CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False, use_attribute_docstrings=True)
"""Every section: unknown keys refused, floats finite. Scalars are strict by their
annotation (Strict()): no "3" -> 3, no true -> 1, ints accepted for floats."""


def _base_type(tp: Any) -> Any:
    """float for `float | None` (TOML has no None: only the other type can be written)."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _duration_unit(key: str) -> float | None:
    """Seconds per unit of a key that names a duration by its suffix, else None."""
    if key.endswith("_ms"):
        return 1e-3
    if key.endswith("_s") or key == "seconds":
        return 1.0
    if key == "minutes" or key.endswith("_min"):
        return 60.0
    return None


def year_in(key: str) -> float:
    """A year in the unit of the duration key."""
    return YEAR_S / _duration_unit(key)


def _problem(why: str) -> PydanticCustomError:
    return PydanticCustomError("recipe", "{why}", {"why": why})


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise _problem("contains a NUL character")
    return value


def _plain_name(value: str) -> str:
    if not value or value in (".", "..") or "/" in value or not value.isprintable():
        raise _problem("must be a plain name (it starts the run folder's name): not empty, no '/', "
                       "no newline or other control character")
    return value


RUN_DIR_KEYS = ("{run_dir}", "{run_dir_windows}")
# Folders a game may never be given to write: the system's and the whole file system.
_SYSTEM = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/root", "/run",
           "/sbin", "/sys", "/usr", "/var")


def _inside_run_dir(value: str) -> str:
    """A value under "{run_dir}" must name a folder inside the run folder: a subfolder, no
    '..' (the run folder itself holds the checkpoints and the recipe)."""
    key = next(k for k in RUN_DIR_KEYS if value.startswith(k))
    rest = [p for p in re.split(r"[\\/]", value[len(key):]) if p]
    if not rest or value[len(key)] not in "/\\":
        raise _problem(f"must name a folder inside the run folder, as {key}/<folder> (the run folder itself "
                       f"holds its checkpoints: a game may not write it)")
    if ".." in rest:
        raise _problem(f"'..' leaves the run folder: name a folder inside it, as {key}/<folder>")
    return value


def writable_folder(value: str) -> str:
    """A folder a game may write (games.writable): "{run_dir}/<folder>", or an absolute
    path with no '..' that is not the file system's root or a system folder."""
    if value.startswith(RUN_DIR_KEYS):
        return _inside_run_dir(value)
    if not value.startswith("/"):
        raise _problem("must be an absolute path or start with {run_dir}/ (a relative folder would be "
                       "relative to the game's folder in its sandbox, which cannot bind it)")
    if ".." in value.split("/"):
        raise _problem("must not contain '..': name the folder itself")
    if system_folder(value):
        raise _problem("is the file system's root or a system folder: name a folder of the game's own")
    return value


def system_folder(path: str) -> bool:
    """The file system's root or a system folder (/usr, /etc, ...): never a game's to write."""
    return (path.rstrip("/") or "/") in _SYSTEM


def _device(value: str) -> str:
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", value):
        raise _problem("must be 'cpu', 'cuda' or 'cuda:N'")
    return value


def choice(choices: Callable[[], Any]) -> AfterValidator:
    """A value from choices() (read at each check: a game registered later counts)."""
    def check(value: Any) -> Any:
        allowed = choices()
        if value not in allowed:
            raise _problem(f"must be one of {', '.join(map(repr, allowed))}")
        return value
    return AfterValidator(check)


def game_groups(value: Any) -> Any:
    """One [games] table is one group; anything but one or more tables is refused."""
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(g, dict) for g in value):
        raise _problem("expected one [games] table or [[games]] tables")
    return value


def _env(value: dict) -> dict[str, str]:
    """Names an environment can hold, values strings or numbers (made strings: true -> "1")."""
    out = []
    for k, v in value.items():
        if not k or "=" in k or "\0" in k:
            out.append(f" key {k!r} (= {v!r}): an environment name must be non-empty, without '=' or NUL")
        elif not isinstance(v, (str, int, float, bool)):
            out.append(f".{k} = {v!r}: must be a string or a number, not {type(v).__name__}")
        elif isinstance(v, float) and not math.isfinite(v):
            out.append(f".{k} = {v!r}: must be a finite number (or a string)")
        elif isinstance(v, str) and "\0" in v:
            out.append(f".{k} = {v!r}: contains a NUL character")
        elif isinstance(v, str) and v.startswith(RUN_DIR_KEYS):
            try:
                _inside_run_dir(v)
            except PydanticCustomError as e:
                out.append(f".{k} = {v!r}: {e.context['why']}")
    if out:
        raise PydanticCustomError("recipe_env", "{problems}", {"problems": out})
    return {k: (str(int(v)) if isinstance(v, bool) else str(v)) for k, v in value.items()}


Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict(), AfterValidator(_no_nul)]
Name = Annotated[str, Strict(), AfterValidator(_no_nul), AfterValidator(_plain_name)]
Device = Annotated[str, Strict(), AfterValidator(_no_nul), AfterValidator(_device)]
Env = Annotated[dict, Strict(), AfterValidator(_env)]
Writable = Annotated[str, Strict(), AfterValidator(_no_nul), AfterValidator(writable_folder)]
"""The annotations of the sections' fields (typing.get_type_hints still reads int, float, ...)."""


# ---- pydantic's errors as the recipe's messages ---------------------------------------------

_TYPE_NAMES = {"int_type": "int", "float_type": "float", "string_type": "str", "bool_type": "bool",
               "dict_type": "dict", "list_type": "list"}


def _dotted(where: str, loc: tuple) -> str:
    name = where
    for part in loc:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name


def _class_at(cls: type, loc: tuple) -> tuple[type | None, Any]:
    """The dataclass that holds the key at loc, and that key's pydantic FieldInfo (or None)."""
    info = None
    named = False  # the next part is a name in a table of sections (spec.levels.LABEL)
    for part in loc:
        if isinstance(part, int):
            continue  # an element of games: list[GameGroup]; its class is read below
        if named:
            named = False
            continue
        if cls is None or not hasattr(cls, "__pydantic_fields__"):
            return None, None
        holder, info = cls, cls.__pydantic_fields__.get(part)
        if info is None:
            return holder, None
        tp = _base_type(info.annotation)
        args = typing.get_args(tp)
        cls = args[0] if typing.get_origin(tp) is list and args else tp
        if typing.get_origin(tp) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            cls, named = args[1], True
        cls = cls if dataclasses.is_dataclass(cls) else None
    return holder if loc else cls, info


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:.12g}"


def _bounds(info: Any) -> dict[str, float]:
    out = {}
    for m in getattr(info, "metadata", ()):
        for k in ("ge", "gt", "le", "lt"):
            if isinstance(m, getattr(annotated_types, k.capitalize())):
                out[k] = getattr(m, k)
    return out


def _range_text(kind: str, key: str, b: dict) -> str:
    """"must be in 0..19" for a bounded range, else the bound broken: ">= 1", "> 0",
    "at most 31536000 (a year)"."""
    lo, hi = b.get("ge"), b.get("le")
    unit = _duration_unit(key)
    year = unit is not None and hi is not None and math.isclose(hi * unit, YEAR_S)
    if lo is not None and hi is not None and not year:
        return f"must be in {_num(lo)}..{_num(hi)}"
    if kind in ("ge", "gt"):
        return f"must be {'>=' if kind == 'ge' else '>'} {_num(b[kind])}"
    return f"must be {'at most' if kind == 'le' else 'below'} {_num(b[kind])}{' (a year)' if year else ''}"


_RANGE = {"greater_than_equal": "ge", "greater_than": "gt", "less_than_equal": "le", "less_than": "lt"}


def problems_of(err: dict, model: type, where: str) -> list[str]:
    """One entry of ValidationError.errors() for model (read under `where`, '' for the
    top) -> the recipe's messages, each naming the key and the value."""
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    name = _dotted(where, loc)
    if kind == "unexpected_keyword_argument":
        holder, _ = _class_at(model, loc)
        known = sorted(f.name for f in dataclasses.fields(holder) if f.init) if holder else []
        return [f"unknown key {name!r} (known: {', '.join(known)})"]
    if kind == "recipe_env":
        return [name + p for p in err["ctx"]["problems"]]
    if kind == "value_error" and loc:  # a section's own checks across its keys (__post_init__)
        return [f"[{name}] {err['ctx']['error']}"]
    if kind == "recipe":
        return [f"{name} = {value!r}: {err['ctx']['why']}"]
    if kind in _TYPE_NAMES:
        return [f"{name} = {value!r}: expected {_TYPE_NAMES[kind]}, got {type(value).__name__}"]
    if kind == "finite_number":
        return [f"{name} = {value!r}: must be a finite number"]
    if kind in ("dataclass_type", "dataclass_args_type"):
        return [f"{name} = {value!r}: expected a table [{name}]"]
    if kind in _RANGE:
        _, info = _class_at(model, loc)
        if getattr(info, "annotation", None) is float and type(value) is int:
            value = float(value)  # as the recipe holds it
        b = _bounds(info) or {_RANGE[kind]: err["ctx"][_RANGE[kind]]}
        return [f"{name} = {value!r}: {_range_text(_RANGE[kind], str(loc[-1]), b)}"]
    return [f"{name} = {value!r}: {err['msg']}"]


def drop(data: dict, loc: tuple) -> bool:
    """Removes the value at loc from the raw dict (so that a second pass takes its
    default). False when loc names nothing removable."""
    d: Any = data
    for part in loc[:-1]:
        try:
            d = d[part]
        except (KeyError, IndexError, TypeError):
            return False
    if not loc or not isinstance(d, dict) or loc[-1] not in d:
        return False
    del d[loc[-1]]
    return True


# ---- across fields -------------------------------------------------------------------------


def _groups_text(r: Any) -> str:
    return "; ".join(f"games[{i}]: count = {g.count}, lanes = {g.lanes}, sides = {g.sides}"
                     for i, g in enumerate(r.games))


def check_ranges(r: Any, problems: list[str]) -> None:
    """What no single field says: the table's rows, over every group, fit its 32-bit count;
    a linear learner schedule has a horizon."""
    n_rows = sum(g.count * g.lanes * g.sides for g in r.games)
    if n_rows > MAX_ROWS:
        problems.append(f"games: {n_rows} rows ({_groups_text(r)}): the table holds at most {MAX_ROWS} "
                        f"(lower games.count or games.lanes)")
    hosted = sorted({f"games.{i}.host = {g.host!r}" for i, g in enumerate(r.games) if g.host})
    if hosted and r.cluster is None:
        problems.append(f"{hosted[0]}: a group on a game host needs a [cluster] section (docs/cluster.md)")
    if r.cluster is not None and not (r.cluster.address or r.cluster.local_nodes):
        problems.append("[cluster]: set address (a Ray cluster to join) or local_nodes (one simulated here)")
    lr = r.learner
    linear = [k for k in ("lr_schedule", "ent_schedule") if getattr(lr, k, "constant") == "linear"]
    if linear and not getattr(lr, "schedule_updates", 0) and not r.stop.updates and not r.stop_after_s:
        problems.append(f"learner.{linear[0]} = 'linear' needs a horizon: set learner.schedule_updates, "
                        f"stop.updates, stop.minutes or stop.seconds")
